"""The experts of each mixture-of-experts model type, read from its Hugging Face config as
``transformers`` 5.24 builds the model (``models/<type>/modeling_<type>.py``): how many,
how wide, the shared ones, and which layers hold them. Each reader returns the transformer
keys and the per-layer rules (:data:`~.huggingface_models.Rules`) of one family; the
:class:`~.huggingface_models.Reader` records the config's name of each key."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ...errors import FlowsimWarning, config_error
from .huggingface_models import Reader, Rules

#: the key under which a config's group-limited routing waits for the run's dispatcher:
#: (``n_group``, ``topk_group``), applied by :func:`routing_groups_keys`
ROUTING_GROUPS = "_routing_groups"


def mixtral_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Mixtral's, GPT-OSS's, Phi-3.5-MoE's and Granite-MoE's experts: as wide as
    ``intermediate_size``, on every layer."""
    return {"experts": read.take("experts", "num_local_experts"),
            "top_k": read.take("top_k", "num_experts_per_tok"),
            "moe_ffn": read.take("moe_ffn", "intermediate_size")}, {}


def granite_shared_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Granite-MoE-Shared: Granite-MoE's experts and one shared MLP of its own width
    (``shared_intermediate_size``; 0: none)."""
    keys, rules = mixtral_keys(read)
    keys["shared_ffn"] = read.take("shared_ffn", "shared_intermediate_size", default=0,
                                   minimum=0)
    return keys, rules


def olmoe_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """OLMoE's experts: ``num_experts`` of ``intermediate_size``, on every layer."""
    return {"experts": read.take("experts", "num_experts", "num_local_experts"),
            "top_k": read.take("top_k", "num_experts_per_tok"),
            "moe_ffn": read.take("moe_ffn", "intermediate_size")}, {}


def qwen_moe_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Qwen-MoE's experts, shared expert and sparse layers."""
    step = read.integer("decoder_sparse_step", 1)
    dense = set(read.layer_list("mlp_only_layers"))
    read.name("moe_layer_freq", "decoder_sparse_step and mlp_only_layers")
    keys = {"experts": read.take("experts", "num_experts"),
            "top_k": read.take("top_k", "num_experts_per_tok"),
            "moe_ffn": read.take("moe_ffn", "moe_intermediate_size"),
            "shared_ffn": read.take("shared_ffn", "shared_expert_intermediate_size",
                                    default=0, minimum=0)}
    # Qwen's rule: layer i a mixture unless listed dense, when the step divides i + 1
    return keys, {"moe_layer_freq": lambda layers: [
        int(i not in dense and (i + 1) % step == 0) for i in range(layers)]}


def deepseek_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """DeepSeek's routed and shared experts, dense first layers and latent attention."""
    keys, rules = _first_dense(read, experts="n_routed_experts",
                               shared="n_shared_experts", first_default=0)
    keys["mla"] = {"q_lora_rank": read.integer("q_lora_rank", 0, minimum=0),
                   "kv_lora_rank": read.integer("kv_lora_rank"),
                   "qk_head_dim": read.integer("qk_nope_head_dim"),
                   "qk_pos_emb_head_dim": read.integer("qk_rope_head_dim"),
                   "v_head_dim": read.integer("v_head_dim")}
    read.name("mla", "q_lora_rank, kv_lora_rank and the head dimensions")
    # group-limited routing (n_group groups, a token's experts from its topk_group best):
    # priced only under DeepEP, so kept aside until the run's dispatcher is known
    groups, limit = read.integer("n_group", 1), read.integer("topk_group", 1)
    if limit > groups:
        raise config_error(read.where, "topk_group", f"at most n_group ({groups})", limit)
    if limit < groups:
        keys[ROUTING_GROUPS] = (groups, limit)
        read.name("routing_groups", "n_group")
        read.name("node_limit", "topk_group")
    return keys, rules


def deepseek_sparse_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """DeepSeek-V3.2: DeepSeek-V3 whose attention reads the ``index_topk`` keys its
    indexer picks, priced as a window of that many keys (the same work per query); the
    indexer itself (64 small heads scoring every earlier key) is not priced."""
    keys, rules = deepseek_keys(read)
    top = read.take("window", "index_topk", default=2048)
    warnings.warn(f"{read.where}: DeepSeek sparse attention: each query's attention is "
                  f"priced over its index_topk ({top}) keys, as a window of {top} (none "
                  "for sequences no longer); the indexer that picks them is not priced",
                  FlowsimWarning, stacklevel=6)
    keys["window"] = top
    return keys, rules


def glm_moe_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """GLM-4.5's experts: DeepSeek's layout (dense first layers, one shared MLP as wide as
    ``n_shared_experts`` experts) with plain grouped-query attention."""
    return _first_dense(read, experts="n_routed_experts", shared="n_shared_experts",
                        first_default=1)


def _first_dense(read: Reader, *, experts: str, shared: str,
                 first_default: int) -> tuple[dict[str, Any], Rules]:
    """DeepSeek's and GLM's experts: every ``moe_layer_freq``-th layer after the first
    ``first_k_dense_replace`` a mixture; ``num_nextn_predict_layers`` multi-token
    prediction depths."""
    width = read.take("moe_ffn", "moe_intermediate_size")
    first = read.integer("first_k_dense_replace", first_default, minimum=0)
    freq = read.integer("moe_layer_freq", 1)
    read.name("moe_layer_freq", "first_k_dense_replace and moe_layer_freq")
    keys: dict[str, Any] = {
        "experts": read.take("experts", experts, "num_local_experts"),
        "top_k": read.take("top_k", "num_experts_per_tok"),
        "moe_ffn": width,
        "shared_ffn": read.take("shared_ffn", shared, default=0, minimum=0) * width,
        # the checkpoint's multi-token prediction modules, which the model trained with
        "mtp_layers": read.take("mtp_layers", "num_nextn_predict_layers", default=0,
                                minimum=0)}
    return keys, {"moe_layer_freq": lambda layers: [
        int(i >= first and i % freq == 0) for i in range(layers)]}


def ernie_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """ERNIE 4.5's experts: one shared MLP as wide as ``moe_num_shared_experts`` experts;
    a mixture on every ``moe_layer_interval``-th layer from ``moe_layer_start_index`` to
    ``moe_layer_end_index`` (-1: the last)."""
    width = read.take("moe_ffn", "moe_intermediate_size")
    interval = read.integer("moe_layer_interval", 1)
    start = read.integer("moe_layer_start_index", 1, minimum=0)
    end = read.integer("moe_layer_end_index", -1, minimum=-1)
    read.name("moe_layer_freq", "moe_layer_start_index, moe_layer_end_index and "
                                "moe_layer_interval")
    keys = {"experts": read.take("experts", "moe_num_experts", "num_experts"),
            "top_k": read.take("top_k", "moe_k", "num_experts_per_tok"),
            "moe_ffn": width,
            "shared_ffn": read.take("shared_ffn", "moe_num_shared_experts", default=0,
                                    minimum=0) * width}
    return keys, {"moe_layer_freq": lambda layers: [
        int((i + 1) % interval == 0 and start <= i <= (layers - 1 if end < 0 else end))
        for i in range(layers)]}


def hunyuan_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Hunyuan-MoE's experts and its one shared MLP, all as wide as ``intermediate_size``
    (the library reads no other width), on every layer; ``num_experts`` and ``moe_topk``
    may be per-layer lists of one value."""
    width = read.take("moe_ffn", "intermediate_size")
    read.name("shared_ffn", "intermediate_size")
    return {"experts": _uniform(read, "experts", "num_experts", "num_local_experts"),
            "top_k": _uniform(read, "top_k", "moe_topk", "num_experts_per_tok"),
            "moe_ffn": width, "shared_ffn": width}, {}


def llama4_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Llama 4's experts (``intermediate_size`` wide, one shared of the same width) on the
    layers ``moe_layers`` lists, else every ``interleave_moe_layer_step``-th from the
    step's own; its dense layers' MLP is ``intermediate_size_mlp`` wide. Its layers with
    rotary embeddings (``no_rope_layers``: 1, by default all but every
    ``no_rope_layer_interval``-th) attend within chunks of ``attention_chunk_size``
    tokens (rule ``chunked``: the chunk per layer, 0 for full attention)."""
    width = read.take("moe_ffn", "intermediate_size")
    read.name("shared_ffn", "intermediate_size")
    keys = {"experts": read.take("experts", "num_local_experts"),
            "top_k": read.take("top_k", "num_experts_per_tok"), "moe_ffn": width,
            "shared_ffn": width, "ffn": read.take("ffn", "intermediate_size_mlp", default=width)}
    chunk = read.take("window", "attention_chunk_size", default=0, minimum=0)
    rotary = read.layer_flags("no_rope_layers")
    every = read.integer("no_rope_layer_interval", 4)
    rules: Rules = {"chunked": lambda layers: [
        chunk * (rotary[i] if i < len(rotary) else int((i + 1) % every != 0))
        for i in range(layers)]}
    read.name("moe_layer_freq", "moe_layers or interleave_moe_layer_step")
    if read.data.get("moe_layers") is not None:
        listed = set(read.layer_list("moe_layers"))
        rules["moe_layer_freq"] = lambda layers: [int(i in listed) for i in range(layers)]
    else:
        step = read.integer("interleave_moe_layer_step", 1)
        rules["moe_layer_freq"] = lambda layers: [int(i % step == step - 1)
                                                  for i in range(layers)]
    return keys, rules


def dbrx_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """DBRX: its own names (``n_layers``, ``d_model``, ``n_heads``) and two blocks,
    ``attn_config`` (``kv_n_heads``) and ``ffn_config`` (``moe_num_experts``,
    ``moe_top_k``, ``ffn_hidden_size``: gated experts on every layer); rotary, untied."""
    attn, ffn = read.block("attn_config"), read.block("ffn_config")
    width = ffn.take("moe_ffn", "ffn_hidden_size", default=3584)
    read.name("ffn", "ffn_config.ffn_hidden_size")
    return {"layers": read.take("layers", "n_layers", "num_hidden_layers"),
            "hidden": read.take("hidden", "d_model", "hidden_size"),
            "heads": read.take("heads", "n_heads", "num_attention_heads"),
            "kv_heads": attn.take("kv_heads", "kv_n_heads", default=1),
            "ffn": width, "vocab": read.take("vocab", "vocab_size", default=32000),
            "gated_mlp": True, "position_embedding": "rope", "tied_embeddings": False,
            "experts": ffn.take("experts", "moe_num_experts", default=4),
            "top_k": ffn.take("top_k", "moe_top_k", default=1), "moe_ffn": width}, {}


def _uniform(read: Reader, target: str, *keys: str) -> int:
    """Transformer key ``target`` from the first of ``keys`` held: a positive integer, or a
    list of one repeated positive integer (per layer)."""
    key = read.held(*keys)
    value = read.data.get(key)
    if isinstance(value, list) and not value:
        raise config_error(read.where, key, "a positive integer, or one per layer", value)
    if isinstance(value, list) and all(v == value[0] for v in value):
        return Reader({key: value[0]}, read.where, names=read.names).take(target, key)
    if isinstance(value, list):
        raise config_error(read.where, key, "one value for every layer (flowsim prices "
                           "the same experts on every layer)", value)
    return read.take(target, key)


#: model types with experts -> the reader of their experts
EXPERTS: dict[str, Callable[[Reader], tuple[dict[str, Any], Rules]]] = {
    "mixtral": mixtral_keys, "gpt_oss": mixtral_keys, "phimoe": mixtral_keys,
    "granitemoe": mixtral_keys, "granitemoeshared": granite_shared_keys, "olmoe": olmoe_keys,
    "qwen2_moe": qwen_moe_keys, "qwen3_moe": qwen_moe_keys, "deepseek_v2": deepseek_keys,
    "deepseek_v3": deepseek_keys, "deepseek_v32": deepseek_sparse_keys,
    "glm4_moe": glm_moe_keys, "ernie4_5_moe": ernie_keys, "hunyuan_v1_moe": hunyuan_keys,
    "llama4_text": llama4_keys}


def routing_groups_keys(keys: dict[str, Any]) -> dict[str, Any]:
    """``keys`` with the config's group-limited routing (:data:`ROUTING_GROUPS`) as
    ``routing_groups`` and ``node_limit`` when the run dispatches with DeepEP and names no
    limit of its own (Megatron-Core routes every dispatcher through the limit, but only
    DeepEP's copies per token depend on it, and the all-to-all dispatcher refuses the keys);
    dropped otherwise."""
    out = dict(keys)
    groups_limit = out.pop(ROUTING_GROUPS, None)
    if groups_limit is not None and out.get("dispatcher") == "deepep" and \
            "node_limit" not in out and "routing_groups" not in out:
        out["routing_groups"], out["node_limit"] = groups_limit
    return out
