"""The experts of each mixture-of-experts model type, read from its Hugging Face config as
``transformers`` 5.24 builds the model (``models/<type>/modeling_<type>.py``): how many,
how wide, the shared ones, and which layers hold them. Each reader returns the transformer
keys and the per-layer rules (:data:`~.huggingface_models.Rules`) of one family."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ...errors import FlowsimWarning, config_error
from .huggingface_models import Reader, Rules


def mixtral_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Mixtral's, GPT-OSS's, Phi-3.5-MoE's and Granite-MoE's experts: as wide as
    ``intermediate_size``, on every layer."""
    return {"experts": read.integer("num_local_experts"),
            "top_k": read.integer("num_experts_per_tok"),
            "moe_ffn": read.integer("intermediate_size")}, {}


def granite_shared_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Granite-MoE-Shared: Granite-MoE's experts and one shared MLP of its own width
    (``shared_intermediate_size``; 0: none)."""
    keys, rules = mixtral_keys(read)
    keys["shared_ffn"] = read.integer("shared_intermediate_size", 0, minimum=0)
    return keys, rules


def olmoe_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """OLMoE's experts: ``num_experts`` of ``intermediate_size``, on every layer."""
    return {"experts": read.integer(read.held("num_experts", "num_local_experts")),
            "top_k": read.integer("num_experts_per_tok"),
            "moe_ffn": read.integer("intermediate_size")}, {}


def qwen_moe_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Qwen-MoE's experts, shared expert and sparse layers."""
    step = read.integer("decoder_sparse_step", 1)
    dense = set(read.layer_list("mlp_only_layers"))
    keys = {"experts": read.integer("num_experts"),
            "top_k": read.integer("num_experts_per_tok"),
            "moe_ffn": read.integer("moe_intermediate_size"),
            "shared_ffn": read.integer("shared_expert_intermediate_size", 0, minimum=0)}
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
    return keys, rules


def deepseek_sparse_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """DeepSeek-V3.2: DeepSeek-V3 whose attention reads the ``index_topk`` keys its
    indexer picks, priced as a window of that many keys (the same work per query); the
    indexer itself (64 small heads scoring every earlier key) is not priced."""
    keys, rules = deepseek_keys(read)
    top = read.integer("index_topk", 2048)
    warnings.warn(f"{read.where}: DeepSeek sparse attention: each query's attention is "
                  f"priced over its index_topk ({top}) keys, as a window of {top}; the "
                  "indexer that picks them is not priced", FlowsimWarning, stacklevel=6)
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
    ``first_k_dense_replace`` a mixture; a multi-token prediction layer warned of."""
    width = read.integer("moe_intermediate_size")
    first = read.integer("first_k_dense_replace", first_default, minimum=0)
    freq = read.integer("moe_layer_freq", 1)
    keys: dict[str, Any] = {
        "experts": read.integer(read.held(experts, "num_local_experts")),
        "top_k": read.integer("num_experts_per_tok"),
        "moe_ffn": width, "shared_ffn": read.integer(shared, 0, minimum=0) * width}
    if read.integer("num_nextn_predict_layers", 0, minimum=0):
        warnings.warn(f"{read.where}: key 'num_nextn_predict_layers' (multi-token "
                      "prediction) is not priced: the model's main layers only",
                      FlowsimWarning, stacklevel=7)
    return keys, {"moe_layer_freq": lambda layers: [
        int(i >= first and i % freq == 0) for i in range(layers)]}


def ernie_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """ERNIE 4.5's experts: one shared MLP as wide as ``moe_num_shared_experts`` experts;
    a mixture on every ``moe_layer_interval``-th layer from ``moe_layer_start_index`` to
    ``moe_layer_end_index`` (-1: the last)."""
    width = read.integer("moe_intermediate_size")
    interval = read.integer("moe_layer_interval", 1)
    start = read.integer("moe_layer_start_index", 1, minimum=0)
    end = read.integer("moe_layer_end_index", -1, minimum=-1)
    keys = {"experts": read.integer(read.held("moe_num_experts", "num_experts")),
            "top_k": read.integer(read.held("moe_k", "num_experts_per_tok")),
            "moe_ffn": width,
            "shared_ffn": read.integer("moe_num_shared_experts", 0, minimum=0) * width}
    return keys, {"moe_layer_freq": lambda layers: [
        int((i + 1) % interval == 0 and start <= i <= (layers - 1 if end < 0 else end))
        for i in range(layers)]}


def hunyuan_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Hunyuan-MoE's experts and its one shared MLP, all as wide as ``intermediate_size``
    (the library reads no other width), on every layer; ``num_experts`` and ``moe_topk``
    may be per-layer lists of one value."""
    width = read.integer("intermediate_size")
    return {"experts": _uniform(read, read.held("num_experts", "num_local_experts")),
            "top_k": _uniform(read, read.held("moe_topk", "num_experts_per_tok")),
            "moe_ffn": width, "shared_ffn": width}, {}


def llama4_keys(read: Reader) -> tuple[dict[str, Any], Rules]:
    """Llama 4's experts (``intermediate_size`` wide, one shared of the same width) on the
    layers ``moe_layers`` lists, else every ``interleave_moe_layer_step``-th from the
    step's own; its dense layers' MLP is ``intermediate_size_mlp`` wide. Its layers with
    rotary embeddings (``no_rope_layers``: 1, by default all but every
    ``no_rope_layer_interval``-th) attend within chunks of ``attention_chunk_size``
    tokens (rule ``chunked``: the chunk per layer, 0 for full attention)."""
    width = read.integer("intermediate_size")
    keys = {"experts": read.integer("num_local_experts"),
            "top_k": read.integer("num_experts_per_tok"), "moe_ffn": width,
            "shared_ffn": width, "ffn": read.integer("intermediate_size_mlp", width)}
    chunk = read.integer("attention_chunk_size", 0, minimum=0)
    rotary = read.layer_flags("no_rope_layers")
    every = read.integer("no_rope_layer_interval", 4)
    rules: Rules = {"chunked": lambda layers: [
        chunk * (rotary[i] if i < len(rotary) else int((i + 1) % every != 0))
        for i in range(layers)]}
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
    attn, ffn = (Reader(_block(read, name), f"{read.where}: {name}")
                 for name in ("attn_config", "ffn_config"))
    width = ffn.integer("ffn_hidden_size", 3584)
    return {"layers": read.integer(read.held("n_layers", "num_hidden_layers")),
            "hidden": read.integer(read.held("d_model", "hidden_size")),
            "heads": read.integer(read.held("n_heads", "num_attention_heads")),
            "kv_heads": attn.integer("kv_n_heads", 1),
            "ffn": width, "vocab": read.integer("vocab_size", 32000), "gated_mlp": True,
            "position_embedding": "rope", "tied_embeddings": False,
            "experts": ffn.integer("moe_num_experts", 4), "top_k": ffn.integer("moe_top_k", 1),
            "moe_ffn": width}, {}


def _block(read: Reader, name: str) -> dict[str, Any]:
    value = read.data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise config_error(read.where, name, "a mapping of the model's settings", value)
    return value


def _uniform(read: Reader, key: str) -> int:
    """A positive integer, or a list of one repeated positive integer (per layer)."""
    value = read.data.get(key)
    if isinstance(value, list) and not value:
        raise config_error(read.where, key, "a positive integer, or one per layer", value)
    if isinstance(value, list) and all(v == value[0] for v in value):
        return Reader({key: value[0]}, read.where).integer(key)
    if isinstance(value, list):
        raise config_error(read.where, key, "one value for every layer (flowsim prices "
                           "the same experts on every layer)", value)
    return read.integer(key)


#: model types with experts -> the family whose config names them, and its reader
EXPERTS: dict[str, tuple[str, Callable[[Reader], tuple[dict[str, Any], Rules]]]] = {
    "mixtral": ("mixtral", mixtral_keys), "gpt_oss": ("mixtral", mixtral_keys),
    "phimoe": ("mixtral", mixtral_keys), "granitemoe": ("mixtral", mixtral_keys),
    "granitemoeshared": ("granitemoeshared", granite_shared_keys),
    "olmoe": ("olmoe", olmoe_keys),
    "qwen2_moe": ("qwen_moe", qwen_moe_keys), "qwen3_moe": ("qwen_moe", qwen_moe_keys),
    "deepseek_v2": ("deepseek", deepseek_keys), "deepseek_v3": ("deepseek", deepseek_keys),
    "deepseek_v32": ("deepseek", deepseek_sparse_keys),
    "glm4_moe": ("glm4_moe", glm_moe_keys), "ernie4_5_moe": ("ernie", ernie_keys),
    "hunyuan_v1_moe": ("hunyuan", hunyuan_keys), "llama4_text": ("llama4", llama4_keys)}

#: each family's names of the keys it reads differently from Llama's (for messages)
EXPERT_NAMES = {
    "mixtral": {"experts": "num_local_experts", "top_k": "num_experts_per_tok",
                "moe_ffn": "intermediate_size"},
    "granitemoeshared": {"experts": "num_local_experts", "top_k": "num_experts_per_tok",
                         "moe_ffn": "intermediate_size",
                         "shared_ffn": "shared_intermediate_size"},
    "olmoe": {"experts": "num_experts", "top_k": "num_experts_per_tok",
              "moe_ffn": "intermediate_size"},
    "qwen_moe": {"experts": "num_experts", "top_k": "num_experts_per_tok",
                 "moe_ffn": "moe_intermediate_size",
                 "shared_ffn": "shared_expert_intermediate_size",
                 "moe_layer_freq": "decoder_sparse_step and mlp_only_layers"},
    "deepseek": {"experts": "n_routed_experts", "top_k": "num_experts_per_tok",
                 "moe_ffn": "moe_intermediate_size", "shared_ffn": "n_shared_experts",
                 "moe_layer_freq": "first_k_dense_replace and moe_layer_freq",
                 "mla": "q_lora_rank, kv_lora_rank and the head dimensions",
                 "window": "index_topk"},
    "glm4_moe": {"experts": "n_routed_experts", "top_k": "num_experts_per_tok",
                 "moe_ffn": "moe_intermediate_size", "shared_ffn": "n_shared_experts",
                 "moe_layer_freq": "first_k_dense_replace and moe_layer_freq"},
    "ernie": {"experts": "moe_num_experts", "top_k": "moe_k",
              "moe_ffn": "moe_intermediate_size", "shared_ffn": "moe_num_shared_experts",
              "moe_layer_freq": "moe_layer_start_index, moe_layer_end_index and "
                                "moe_layer_interval"},
    "hunyuan": {"experts": "num_experts", "top_k": "moe_topk", "moe_ffn": "intermediate_size",
                "shared_ffn": "intermediate_size"},
    "dbrx": {"layers": "n_layers", "hidden": "d_model", "heads": "n_heads",
             "kv_heads": "attn_config.kv_n_heads", "ffn": "ffn_config.ffn_hidden_size",
             "experts": "ffn_config.moe_num_experts", "top_k": "ffn_config.moe_top_k",
             "moe_ffn": "ffn_config.ffn_hidden_size"},
    "llama4": {"experts": "num_local_experts", "top_k": "num_experts_per_tok",
               "moe_ffn": "intermediate_size", "shared_ffn": "intermediate_size",
               "window": "attention_chunk_size",
               "ffn": "intermediate_size_mlp",
               "moe_layer_freq": "moe_layers or interleave_moe_layer_step"},
}
