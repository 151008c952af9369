"""Hybrid models from their Hugging Face configs: Nemotron-H and Nemotron 3
(``model_type: nemotron_h``, NVIDIA's ``NemotronHForCausalLM``), whose layers a pattern
names (:mod:`.transformer_hybrid`), read as Megatron-Bridge's ``NemotronHBridge`` maps the
config (``src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py``: the pattern, the
Mamba-2 widths, LatentMoE's width, the multi-token prediction depths'
``mtp_hybrid_override_pattern``; squared-ReLU MLPs and experts, no position embedding)."""

from __future__ import annotations

from typing import Any

from ...errors import config_error
from .huggingface_models import Reader
from .transformer_hybrid import MOE, read_pattern


def nemotron_h_keys(read: Reader) -> dict[str, Any]:
    """A Nemotron-H config's transformer keys: ``hybrid_override_pattern`` (the layer count
    is checked against it by the generator), attention, the dense MLP, the experts where the
    pattern has them, and the Mamba-2 mixers (``mamba_num_heads`` or ``expand`` times the
    hidden size over ``mamba_head_dim``)."""
    pattern = read.data.get("hybrid_override_pattern")
    read.name("hybrid_pattern", "hybrid_override_pattern")
    pattern = read_pattern({"hybrid_pattern": pattern}, read.where)
    if not pattern:
        raise config_error(read.where, "hybrid_override_pattern", "the layers' pattern (a "
                           "string of M, *, - and E)", read.data.get("hybrid_override_pattern"))
    heads = read.take("heads", "num_attention_heads")
    hidden = read.take("hidden", "hidden_size")
    head_dim = read.integer("mamba_head_dim", 64)
    mamba = {"heads": read.integer("mamba_num_heads", 0, minimum=0) or
             read.integer("expand", 2) * hidden // head_dim,
             "head_dim": head_dim, "state": read.integer("ssm_state_size", 128),
             "groups": read.integer("n_groups", 8), "conv": read.integer("conv_kernel", 4),
             "chunk": read.integer("chunk_size", 128)}
    keys: dict[str, Any] = {
        "layers": read.take("layers", "num_hidden_layers"), "hidden": hidden, "heads": heads,
        "kv_heads": read.take("kv_heads", "num_key_value_heads", default=heads),
        "head_dim": read.take("head_dim", "head_dim", "attention_head_dim",
                              default=hidden // heads),
        "ffn": read.take("ffn", "intermediate_size"), "vocab": read.take("vocab", "vocab_size"),
        "gated_mlp": False, "position_embedding": "none",
        "tied_embeddings": read.flag("tie_word_embeddings", False),
        "hybrid_pattern": pattern, "mamba": mamba}
    if MOE in pattern:
        keys.update(experts=read.take("experts", "n_routed_experts", "num_experts"),
                    top_k=read.take("top_k", "num_experts_per_tok"),
                    moe_ffn=read.take("moe_ffn", "moe_intermediate_size"),
                    shared_ffn=read.take("shared_ffn", "moe_shared_expert_intermediate_size",
                                         default=0, minimum=0),
                    moe_latent=read.take("moe_latent", "moe_latent_size", default=0,
                                         minimum=0))
    depths = read.integer("num_nextn_predict_layers", 0, minimum=0)
    if depths:   # multi-token prediction: its depth's layers after the pattern, per depth
        read.name("mtp_layers", "num_nextn_predict_layers and mtp_hybrid_override_pattern")
        depth = read.data.get("mtp_hybrid_override_pattern")
        if not isinstance(depth, str) or not depth:
            raise config_error(read.where, "mtp_hybrid_override_pattern", "a depth's layers "
                               "(e.g. '*E') beside num_nextn_predict_layers", depth)
        keys["hybrid_pattern"] = pattern + ("/" + depth) * depths
    return keys
