"""Reading the transformer generator's arguments into a :class:`~.transformer_spec.TransformerSpec`.

Every key and its range are checked here, and the divisibility rules Megatron-LM imposes
between them in :mod:`.transformer_checks`, before any graph is built; the checks that need
the network (degrees multiplying to its NPU count) are in :mod:`.transformer_mapping`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from ..._validate import (
    REQUIRED,
    Quantity,
    as_choice,
    as_config,
    check_unknown_keys,
    read_bool,
    read_choice,
    read_int,
    read_list,
    read_number,
)
from ...errors import config_error
from ..roofline import parse_roofline
from . import transformer_hybrid as hybrid
from . import transformer_values as tv
from .transformer_checks import check_consistent, check_head_width
from .transformer_choices import (
    ATTENTIONS,
    CP_COMM_TYPES,
    CROSS_ENTROPY_IMPLS,
    DISPATCHERS,
    DTYPES,
    EXPERT_LAYOUTS,
    FP8_LIBRARIES,
    FSDP_IMPLS,
    FSDP_OUTERS,
    FSDP_RESHARDS,
    LORA_TARGETS,
    OFFLOAD_MODULES,
    OPTIMIZERS,
    POSITION_EMBEDDINGS,
    RECOMPUTE_MODULES,
    RECOMPUTES,
    SCHEDULES,
    UB_CONFIGS,
)
from .transformer_precision import read_quant_recipe
from .transformer_spec import A100_ROOFLINE, HEAD_DIM, KEYS, TransformerSpec


def parse_transformer(values: Mapping[str, Any], source: str) -> TransformerSpec:
    """Validate transformer arguments (keys :data:`KEYS`) from ``source``.

    Raises
    ------
    ConfigError
        Naming ``source``, the key, what was expected and what was found.
    """
    as_config(values, source=source, what="transformer")
    check_unknown_keys(values, KEYS, source=source)
    v: dict[str, Any] = {key: _count(values, key, source) for key in ("hidden", "sequence")}
    marked, v["hybrid_mtp"], depths = hybrid.split_depths(hybrid.read_pattern(values, source))
    v["hybrid_pattern"] = marked.replace(hybrid.PIPE, "")
    v["mamba"] = hybrid.read_mamba(values, source)
    v["layers"] = _count(values, "layers", source, len(v["hybrid_pattern"]) or ...)
    for key, default in (("micro_batch", 1), ("tp", 1), ("pp", 1), ("dp", 1), ("cp", 1),
                         ("ep", 1), ("vpp", 1)):
        v[key] = _count(values, key, source, default)
    for key in ("micro_batches", "global_batch", "heads", "kv_heads", "head_dim", "ffn",
                "moe_ffn", "shared_ffn", "moe_latent", "vocab", "experts", "top_k",
                "bucket_size", "window", "expert_tp", "node_limit", "routing_groups",
                "microbatch_group", "fsdp_shard", "fsdp_replicas", "mtp_layers",
                "metric_cross_entropies", "lora_rank", "document_tokens"):
        v[key] = _count(values, key, source, 0, minimum=0)
    if depths and v["mtp_layers"] not in (0, depths):   # the pattern names the depths
        raise config_error(source, "mtp_layers", f"{depths}, the depths hybrid_pattern names "
                           "(or unset)", v["mtp_layers"])
    v["mtp_layers"] = v["mtp_layers"] or depths
    v["gated_mlp"] = read_bool(values, "gated_mlp", source=source, default=None)
    for key in ("sp", "overlap_grad_reduce", "overlap_param_gather",
                "tp_comm_overlap", "tp_comm_overlap_disable_qkv", "tp_comm_overlap_rs_dgrad",
                "lora_a2a", "grad_reduce_in_bf16", "fp8_param_gather", "fsdp",
                "cross_entropy_fusion", "moe_a2a_overlap", "fp8_dispatch",
                "fsdp_defer_grad_sync", "mtp_repeated",
                "fused_grouped_mlp", "fp8_attention", "activation_func_fp8_input_store"):
        v[key] = read_bool(values, key, source=source, default=False)
    v["tied_embeddings"] = read_bool(values, "tied_embeddings", source=source, default=True)
    for key in ("align_param_gather", "align_grad_reduce"):
        v[key] = read_bool(values, key, source=source, default=True)
    v["scatter_gather"] = read_bool(values, "scatter_gather", source=source, default=True)
    v["distributed_optimizer"] = read_bool(values, "distributed_optimizer", source=source,
                                           default=read_bool(values, "zero", source=source,
                                                             default=False))
    v["optimizer"] = read_choice(values, "optimizer", OPTIMIZERS, source=source, default="adam",
                                 case_insensitive=True)
    v["capacity_factor"] = read_number(values, "capacity_factor", source=source, default=1.0,
                                       quantity=Quantity("", 1e-3, 1e3, positive=True))
    v["expert_layout"] = read_choice(values, "expert_layout", EXPERT_LAYOUTS, source=source,
                                     default="within_dp", case_insensitive=True)
    v["schedule"] = read_choice(values, "schedule", SCHEDULES, source=source,
                                default="interleaved" if v["vpp"] > 1 else "1f1b",
                                case_insensitive=True)
    v["recompute"] = read_choice(values, "recompute", RECOMPUTES, source=source,
                                 default="none", case_insensitive=True)
    v["recompute_every"] = _count(values, "recompute_every", source, default=1)
    v["recompute_layers"] = _count(values, "recompute_layers", source, default=0, minimum=0)
    v["recompute_modules"] = tuple(dict.fromkeys(read_list(   # each once, in the order given
        values, "recompute_modules", partial(as_choice, choices=RECOMPUTE_MODULES),
        source=source, default=(), max_length=len(RECOMPUTE_MODULES), scalar=True,
        what="a list of " + ", ".join(RECOMPUTE_MODULES))))
    v["cpu_offload_layers"] = _count(values, "cpu_offload_layers", source, default=0,
                                     minimum=0)
    v["offload_modules"] = tuple(dict.fromkeys(read_list(   # each once, in the order given
        values, "offload_modules", partial(as_choice, choices=OFFLOAD_MODULES), source=source,
        default=(), max_length=len(OFFLOAD_MODULES), scalar=True,
        what="a list of " + ", ".join(OFFLOAD_MODULES))))
    v["offload_min_elements"] = _count(values, "offload_min_elements", source,
                                       default=1024 * 1024, minimum=0)
    v["offload_max_inflight"] = None if values.get("offload_max_inflight") is None else \
        _count(values, "offload_max_inflight", source, minimum=0)
    v["attention"] = read_choice(values, "attention", ATTENTIONS, source=source,
                                 default="flash", case_insensitive=True)
    v["cross_entropy_fusion_impl"] = read_choice(
        values, "cross_entropy_fusion_impl", CROSS_ENTROPY_IMPLS, source=source,
        default="native", case_insensitive=True)
    v["fp8_library"] = read_choice(values, "fp8_library", FP8_LIBRARIES, source=source,
                                   default="transformer_engine", case_insensitive=True)
    v["dispatcher"] = read_choice(values, "dispatcher", DISPATCHERS, source=source,
                                  default="alltoall", case_insensitive=True)
    v["fsdp_reshard"] = read_choice(values, "fsdp_reshard", FSDP_RESHARDS, source=source,
                                    default="after_forward", case_insensitive=True)
    v["fsdp_outer"] = read_choice(values, "fsdp_outer", FSDP_OUTERS, source=source,
                                  default="all_reduce", case_insensitive=True)
    v["fsdp_impl"] = read_choice(values, "fsdp_impl", FSDP_IMPLS, source=source,
                                 default="fsdp2", case_insensitive=True)
    v["cp_comm_type"] = read_choice(values, "cp_comm_type", CP_COMM_TYPES, source=source,
                                    default="p2p", case_insensitive=True)
    v["lora_targets"] = tuple(dict.fromkeys(read_list(   # each once, in the order given
        values, "lora_targets", partial(as_choice, choices=LORA_TARGETS), source=source,
        default=LORA_TARGETS, min_length=1, max_length=len(LORA_TARGETS), scalar=True,
        what="a list of " + ", ".join(LORA_TARGETS))))
    v["position_embedding"] = read_choice(values, "position_embedding", POSITION_EMBEDDINGS,
                                          source=source, default="learned_absolute",
                                          case_insensitive=True)
    v["tp_comm_overlap_cfg"] = read_choice(values, "tp_comm_overlap_cfg", UB_CONFIGS,
                                           source=source, default="nemo",
                                           case_insensitive=True)
    v["dtype"], v["fp8_recipe"] = tv.read_precision(values, source, DTYPES)
    for end in ("start", "end"):
        v[f"bf16_layers_at_{end}"] = _count(values, f"bf16_layers_at_{end}", source,
                                            default=0, minimum=0)
    v["quant_recipe"] = read_quant_recipe(values.get("quant_recipe"), source)
    v["mla"] = tv.read_mla(values, source)
    v["pipeline_layout"] = tv.read_layout(values, source)
    v["pipeline_layout"] = hybrid.stage_layers(marked, v["pp"], v["vpp"], v["pipeline_layout"],
                                               source) or v["pipeline_layout"]
    v["moe_layer_freq"] = tv.read_moe_layers(values, source)
    v["window_skip_freq"] = tv.read_layer_pattern(values, "window_skip_freq", source,
                                                  "a full-attention one")
    v["device"] = tv.read_device(values, source)
    v["roofline"] = None if values.get("roofline") is None else \
        parse_roofline(values["roofline"], source, default=A100_ROOFLINE)
    v["dims"] = tv.read_dims(values.get("dims"), source)
    check_head_width(v, source)
    spec = TransformerSpec(**v, source=source)
    spec = _with_defaults(spec)
    check_consistent(spec)
    hybrid.check_hybrid(spec)
    return spec


def _count(values: Mapping[str, Any], key: str, source: str, default: Any = ...,
           minimum: int = 1) -> int:
    """An integer key, at least ``minimum``, at most its :data:`~.transformer_values.MAXIMA`."""
    return read_int(values, key, source=source, minimum=minimum, maximum=tv.MAXIMA[key],
                    default=REQUIRED if default is ... else default)


def _with_defaults(spec: TransformerSpec) -> TransformerSpec:
    """Fill the keys whose defaults depend on others (Megatron-LM's defaults)."""
    heads = spec.heads or max(1, spec.hidden // (spec.head_dim or HEAD_DIM))
    head_dim = spec.head_dim or spec.hidden // heads
    ffn = spec.ffn or 4 * spec.hidden
    changes: dict[str, Any] = {
        "gated_mlp": tv.gated_mlp_default(spec) if spec.gated_mlp is None else spec.gated_mlp,
        "heads": heads, "head_dim": head_dim, "kv_heads": spec.kv_heads or heads, "ffn": ffn,
        "moe_ffn": spec.moe_ffn or ffn, "top_k": spec.top_k or (1 if spec.experts else 0),
        "expert_tp": spec.expert_tp or spec.tp,
        "fsdp_shard": spec.fsdp_shard or spec.dp // max(1, spec.fsdp_replicas),
        # communication overlap of tensor parallelism, and experts with tensor parallelism,
        # need sequence parallelism (Megatron-LM; Megatron-Core's MoELayer refuses to train
        # without it)
        "sp": spec.sp or (spec.tp > 1 and (spec.tp_comm_overlap or spec.experts > 0)),
        "window_skip_freq": tv.window_pattern(spec.window_skip_freq, spec.layers, spec.window,
                                              spec.source),
        "moe_layer_freq": tv.moe_pattern(spec.moe_layer_freq, spec.layers, spec.experts,
                                      spec.source)}
    if spec.hybrid_pattern:   # the pattern says which layers are what
        if spec.moe_layer_freq != 1:
            raise config_error(spec.source, "moe_layer_freq", "unset with hybrid_pattern "
                               "(its E layers are the mixtures of experts)",
                               spec.moe_layer_freq)
        moe = tuple(int(c == hybrid.MOE) for c in spec.hybrid_pattern)
        changes["moe_layer_freq"] = () if all(moe) or not any(moe) else moe
        if hybrid.MAMBA in spec.hybrid_pattern and spec.mamba is None:
            changes["mamba"] = hybrid.MambaMixer()
    return replace(spec, **changes)
