"""Consistency rules between the transformer generator's keys (Megatron-LM's own
requirements and flowsim's limits), checked once every key has been read and defaulted
(:func:`.transformer_parse.parse_transformer`), and the small derived facts they use.

Every ``spec`` here is a :class:`~.transformer_spec.TransformerSpec` (typed ``Any``: that
module imports this one, and the package has no import cycles, not even for types).
"""

from __future__ import annotations

import warnings
from typing import Any

from ...errors import ConfigError, FlowsimWarning, Need, config_error, requirement
from ..kernels import BLOCK_SCALED_RECIPES
from .transformer_choices import LORA_TARGETS, ROW_PARALLEL
from .transformer_dispatch_checks import check_dispatch
from .transformer_offload_checks import check_offload_modules

#: Largest graph a generator builds (ops over all programs), before anything is allocated.
MAX_OPS = 5_000_000


def micro_batches(spec: Any) -> int:
    """Micro-batches per pipeline per iteration: ``global_batch / (micro_batch * dp)``, or
    ``micro_batches`` as given."""
    if spec.micro_batches:
        return spec.micro_batches
    return spec.global_batch // (spec.micro_batch * spec.dp)


def check_head_width(values: dict[str, Any], source: str) -> None:
    """Heads given without ``head_dim`` divide ``hidden`` (Megatron-LM's rule without
    ``--kv-channels``): their width is ``hidden / heads``."""
    hidden, heads = values["hidden"], values["heads"]
    if heads and not values["head_dim"] and hidden % heads:
        raise config_error(source, "heads", f"a divisor of hidden={hidden} (or head_dim "
                           f"given beside it)", heads)


def check_consistent(spec: Any) -> None:
    """Divisibility rules between the arguments (Megatron-LM's own requirements)."""
    src = spec.source
    need = requirement(src)

    need(bool(spec.micro_batches) != bool(spec.global_batch), "global_batch",
         "either global_batch (sequences per iteration) or micro_batches, not both and not "
         "neither", spec.global_batch or None)
    if spec.global_batch:
        need(spec.global_batch % (spec.micro_batch * spec.dp) == 0, "global_batch",
             f"a multiple of micro_batch * dp = {spec.micro_batch * spec.dp} (micro-batches "
             f"split evenly over the data-parallel ranks)", spec.global_batch)
    need(spec.heads % spec.tp == 0, "heads", f"a multiple of tp={spec.tp}", spec.heads)
    need(spec.heads % spec.kv_heads == 0, "kv_heads",
         f"a divisor of heads={spec.heads} (grouped-query attention)", spec.kv_heads)
    need(spec.kv_heads % spec.tp == 0 or spec.tp % spec.kv_heads == 0, "kv_heads",
         f"a multiple or a divisor of tp={spec.tp}", spec.kv_heads)
    need(spec.ffn % spec.tp == 0, "ffn", f"a multiple of tp={spec.tp}", spec.ffn)
    if 0 < spec.window < spec.sequence:   # flowsim's limits (a window as long as the
        # sequence is none): fused attention, one context-parallel rank
        need(spec.attention != "unfused", "window", "0 with attention: unfused (flowsim "
             "does not model them together)", spec.window)
        need(spec.cp == 1, "window", f"0 with cp={spec.cp} (flowsim does not model them "
             f"together)", spec.window)
    if spec.mla is not None:   # flowsim's limits: what its MLA model leaves out
        need(spec.kv_heads == spec.heads, "kv_heads", f"heads={spec.heads} with mla (each "
             f"head has its own keys and values)", spec.kv_heads)
        why = " with mla (flowsim does not model them together)"
        need(spec.cp == 1, "cp", "1" + why, spec.cp)
        need(spec.attention != "unfused", "attention", "flash or flash2" + why, spec.attention)
        need(not spec.tp_comm_overlap or spec.tp == 1, "tp_comm_overlap", "false" + why,
             spec.tp_comm_overlap)
    need(not spec.mtp_layers or spec.vocab > 0, "mtp_layers", "0 without a vocabulary (a "
         "multi-token prediction layer embeds tokens and predicts them)", spec.mtp_layers)
    need(not spec.metric_cross_entropies or spec.vocab > 0, "metric_cross_entropies",
         "0 without a vocabulary (the metrics read the output layer's logits)",
         spec.metric_cross_entropies)
    need(spec.recompute_every == 1 or spec.recompute == "full", "recompute_every",
         "1 unless recompute is full (it picks the layers full recomputation re-runs)",
         spec.recompute_every)
    need(spec.recompute_layers == 0 or spec.recompute == "full", "recompute_layers",
         "0 unless recompute is full (it picks the layers full recomputation re-runs)",
         spec.recompute_layers)
    need(spec.recompute_layers == 0 or spec.recompute_every == 1, "recompute_layers",
         f"0 with recompute_every={spec.recompute_every} (two ways to pick the layers)",
         spec.recompute_layers)
    if spec.optimizer != "adam":   # what Muon's optimizers refuse, or flowsim does not price
        why = f" with optimizer {spec.optimizer}"
        need(not spec.fsdp, "fsdp", "false" + why + " (Megatron-Core's Muon does not shard "
             "parameters)", spec.fsdp)
        need(not spec.fp8_param_gather, "fp8_param_gather", "false" + why + " (Megatron-"
             "Bridge turns it off for Muon)", spec.fp8_param_gather)
        need(not spec.frozen, "lora_rank", "0" + why, spec.lora_rank)
        need(not spec.hybrid_pattern, "hybrid_pattern", "none" + why + " (Mamba's in_proj "
             "takes Adam: not priced)", spec.hybrid_pattern)
        need(spec.optimizer == "muon" or not spec.distributed_optimizer,
             "distributed_optimizer", "false with optimizer dist_muon (its layer-wise "
             "optimizer gathers the weights itself; optimizer muon with distributed_optimizer "
             "is the sharded layout)", spec.distributed_optimizer)
    if spec.cpu_offload_layers:   # what Megatron-Core's TransformerConfig allows with it
        why = " with cpu_offload_layers (Megatron-Core's CPU offloading)"
        need(spec.cpu_offload_layers < spec.layers, "cpu_offload_layers",
             f"fewer than layers={spec.layers} (the last layer's activations stay)",
             spec.cpu_offload_layers)
        need(spec.pp == 1, "pp", "1" + why, spec.pp)
        need(spec.recompute == "none", "recompute", "none" + why, spec.recompute)
        need(not spec.hybrid_pattern, "hybrid_pattern", "none" + why + " (its hybrid "
             "stack offloads nothing)", spec.hybrid_pattern)
        need(spec.roofline is None, "roofline", "none" + why + ": a copy to the host "
             "takes a device preset's host link", "a roofline")
    if spec.recompute == "every_other_matmul":   # torchtitan's policy saves the attention
        need(spec.attention != "unfused", "attention", "flash or flash2 with recompute: "
             "every_other_matmul (the policy saves the fused attention's output)",
             spec.attention)
    if spec.sp:
        need(spec.sequence % (spec.tp * spec.cp) == 0, "sequence",
             f"a multiple of tp * cp = {spec.tp * spec.cp} with sequence parallelism",
             spec.sequence)
    if spec.cp > 1:
        need(spec.sequence % (2 * spec.cp) == 0, "sequence",
             f"a multiple of 2 * cp = {2 * spec.cp} (context parallelism splits the sequence "
             f"into 2 * cp chunks for causal load balancing)", spec.sequence)
    if spec.cp > 1 and spec.cp_comm_type == "a2a":   # Transformer Engine's requirements
        need(spec.attention != "unfused", "cp_comm_type", "p2p or all_gather with unfused "
             "attention (the all-to-all kind needs a fused kernel)", spec.cp_comm_type)
        for key in ("heads", "kv_heads"):
            need(getattr(spec, key) % (spec.tp * spec.cp) == 0, key,
                 f"a multiple of tp * cp = {spec.tp * spec.cp} with cp_comm_type: a2a (each "
                 f"rank attends 1 / cp of its tensor-parallel heads)", getattr(spec, key))
    if spec.experts:
        need(spec.experts % spec.ep == 0, "experts", f"a multiple of ep={spec.ep}",
             spec.experts)
        need(spec.top_k <= spec.experts, "top_k", f"at most experts={spec.experts}",
             spec.top_k)
        need(spec.expert_tp in (1, spec.tp), "expert_tp",
             f"1 or tp={spec.tp} (each expert split over the tensor-parallel ranks, or not "
             f"at all)", spec.expert_tp)
        need(spec.moe_ffn % spec.expert_tp == 0, "moe_ffn",
             f"a multiple of expert_tp={spec.expert_tp}", spec.moe_ffn)
        need(spec.shared_ffn % spec.tp == 0, "shared_ffn", f"a multiple of tp={spec.tp}",
             spec.shared_ffn)
    else:
        need(not spec.shared_ffn, "shared_ffn", "0 without experts (a dense model's MLP "
                                                "is 'ffn')", spec.shared_ffn)
        need(spec.expert_tp == spec.tp, "expert_tp", f"unset (or tp={spec.tp}) without "
                                                     f"experts", spec.expert_tp)
    if folds_experts(spec):
        # the expert ranks are laid over the dense ones innermost first: the tensor-parallel
        # ranks too when experts are not split over them (expert_tp 1), then CP, then DP
        named = ((("tp", spec.tp),) if spec.expert_tp == 1 else ()) + (
            ("cp", spec.cp), ("fsdp_shard" if spec.fsdp else "dp", spec.fsdp_shard))
        need(_folds(spec.ep, tuple(size for _, size in named)), "ep",
             "a product of leading parts of " + " x ".join(f"{k}={v}" for k, v in named) +
             " (folded expert parallelism takes those ranks in that order)", spec.ep)
        need(spec.dims is None, "expert_layout", "within_dp with explicit dims (flowsim "
             "does not fold expert parallelism there)", spec.expert_layout)
    else:
        hint = "; expert_layout: folded lets it span the context-parallel ranks too, as " \
               "Megatron-Core 0.10 on does" if spec.cp > 1 else ""
        need(spec.dp % spec.ep == 0, "ep", f"a divisor of dp={spec.dp} (expert parallelism "
                                           f"splits the data-parallel ranks{hint})", spec.ep)
    need(spec.ep == 1 or spec.experts > 0, "ep", "1 without experts", spec.ep)
    if not spec.cross_entropy_fusion and spec.cross_entropy_fusion_impl != "native":
        # as Megatron-Core does: the implementation picks a fused cross entropy, and none runs
        warnings.warn(f"{_where(spec.source)}cross_entropy_fusion_impl "
                      f"{spec.cross_entropy_fusion_impl} without cross_entropy_fusion: the "
                      "unfused cross entropy is priced", FlowsimWarning, stacklevel=5)
    if spec.moe_a2a_overlap:   # Megatron-Core's conditions for its combined 1F1B
        need(spec.ep > 1, "moe_a2a_overlap", "false without expert parallelism (ep > 1)",
             spec.moe_a2a_overlap)
        need(spec.schedule != "dualpipev", "moe_a2a_overlap", "false with schedule "
             "dualpipev (its forwards already run beside backwards)", spec.moe_a2a_overlap)
        need(spec.pp == 1 or spec.vpp > 1, "moe_a2a_overlap",
             f"false with pp={spec.pp} unless the schedule interleaves (vpp > 1)",
             spec.moe_a2a_overlap)
        need(spec.schedule != "gpipe", "schedule", "1f1b or interleaved with "
             "moe_a2a_overlap", spec.schedule)
        need(spec.recompute != "full", "recompute", "none, selective or every_other_matmul "
             "with moe_a2a_overlap", spec.recompute)
        need(not (spec.fsdp and spec.vpp > 1), "moe_a2a_overlap", "false with fsdp and an "
             "interleaved schedule (Megatron-Core does not run them together)",
             spec.moe_a2a_overlap)
    check_dispatch(spec, need)
    if spec.fused_grouped_mlp:
        need(spec.experts > 0, "fused_grouped_mlp", "false without experts",
             spec.fused_grouped_mlp)
        need(spec.dtype == "fp8" and spec.fp8_recipe in BLOCK_SCALED_RECIPES,
             "fused_grouped_mlp", "false unless the recipe is block-scaled (mxfp8 or nvfp4: "
             "Transformer Engine fuses the grouped MLP for those only)", spec.fused_grouped_mlp)
    if spec.fp8_attention:
        need(spec.dtype == "fp8" and spec.fp8_recipe != "nvfp4", "fp8_attention",
             "false unless dtype is fp8 under a per-tensor or MXFP8 recipe (FP8 attention "
             "is priced from cuDNN's measurements of those)", spec.fp8_attention)
        need(spec.attention == "flash", "attention", "flash with fp8_attention (only "
             "cuDNN's fused attention runs in FP8)", spec.attention)
    need(spec.vpp == 1 or spec.pp > 1, "vpp", "1 without pipeline parallelism (pp=1)",
         spec.vpp)
    need(spec.vpp == 1 or spec.schedule in ("interleaved", "dualpipev"), "schedule",
         "'interleaved' or 'dualpipev' when vpp > 1", spec.schedule)
    need(spec.vpp > 1 or spec.schedule != "interleaved", "vpp",
         "> 1 with the interleaved schedule", spec.vpp)
    need(spec.vpp == 2 or spec.schedule != "dualpipev", "vpp",
         "2 with schedule dualpipev (its V: two chunks per pipeline rank)", spec.vpp)
    need(not spec.fp8_param_gather or spec.dtype == "fp8", "fp8_param_gather",
         "false without dtype: fp8", spec.fp8_param_gather)
    need(not spec.activation_func_fp8_input_store or spec.gated_mlp,
         "activation_func_fp8_input_store", "false without gated_mlp (Megatron-Core stores "
         "only SwiGLU's input in FP8)", spec.activation_func_fp8_input_store)
    need(not (spec.tp_comm_overlap and spec.fp8_recipe == "nvfp4"), "tp_comm_overlap",
         "false with NVFP4 (Transformer Engine's userbuffers take no NVFP4 quantizer; "
         "Megatron-Bridge's recipes turn the overlap off for it)", spec.tp_comm_overlap)
    _check_precisions(spec, need)
    _check_recompute_modules(spec, need)
    need(spec.fsdp or not spec.fsdp_defer_grad_sync, "fsdp_defer_grad_sync",
         "false without fsdp", spec.fsdp_defer_grad_sync)
    need(not spec.moe_latent or spec.experts > 0, "moe_latent", "0 without experts (the "
         "experts' latent width)", spec.moe_latent)
    need(not spec.mtp_repeated or spec.mtp_layers > 0, "mtp_repeated",
         "false without mtp_layers", spec.mtp_repeated)
    check_offload_modules(spec, need)
    need(spec.offload_max_inflight is None or bool(spec.offload_modules),
         "offload_max_inflight", "unset without offload_modules", spec.offload_max_inflight)
    need(spec.fsdp_outer == "all_reduce" or (spec.fsdp and spec.fsdp_shard < spec.dp and
                                             not spec.fsdp_defer_grad_sync), "fsdp_outer",
         "all_reduce (unset) unless fsdp has replicas (fsdp_replicas > 1, or fsdp_shard < dp) "
         "and no fsdp_defer_grad_sync (Megatron-FSDP's replicas reduce once anyway)",
         spec.fsdp_outer)
    need((spec.fsdp and spec.pp == 1) or spec.fsdp_reshard == "after_forward",
         "fsdp_reshard", "after_forward (unset) without fsdp, or under pipeline parallelism "
         "(whose stages keep every unit gathered to the last backward)", spec.fsdp_reshard)
    need(not spec.fsdp_replicas or (spec.fsdp and spec.fsdp_replicas == spec.dp //
                                    spec.fsdp_shard and spec.dp % spec.fsdp_replicas == 0),
         "fsdp_replicas", f"0 (unset) without fsdp, else a divisor of dp={spec.dp} (and "
         "dp / fsdp_shard if both are given)", spec.fsdp_replicas)
    need(spec.fsdp or spec.fsdp_impl == "fsdp2", "fsdp_impl", "fsdp2 (unset) without fsdp",
         spec.fsdp_impl)
    need(spec.fsdp_outer == "all_reduce" or spec.fsdp_impl == "megatron", "fsdp_outer",
         "all_reduce (unset) unless fsdp_impl is megatron (the other choices are "
         "Megatron-FSDP's)", spec.fsdp_outer)
    need(spec.fsdp or spec.fsdp_shard == spec.dp, "fsdp_shard",
         "unset without fsdp (it shards FSDP's units)", spec.fsdp_shard)
    shard = ("fsdp_replicas", spec.fsdp_replicas) if spec.fsdp_replicas else \
        ("fsdp_shard", spec.fsdp_shard)
    need(spec.dp % spec.fsdp_shard == 0 and (spec.fsdp_shard % spec.ep == 0 or
                                             folds_experts(spec)), shard[0],
         f"one whose sharding groups divide dp={spec.dp} and are a multiple of ep={spec.ep} "
         f"(they split the data-parallel ranks into replicas)", shard[1])
    need(spec.dims is None or spec.fsdp_shard == spec.dp, "fsdp_shard",
         f"dp={spec.dp} (all data-parallel ranks) with explicit dims", spec.fsdp_shard)
    need(not spec.overlap_param_gather or spec.distributed_optimizer or spec.fsdp,
         "overlap_param_gather",
         "false without distributed_optimizer (parameters are gathered only when the "
         "optimizer is sharded)", spec.overlap_param_gather)
    if spec.document_tokens:   # packed documents: Transformer Engine's THD attention
        need(spec.document_tokens <= spec.sequence, "document_tokens",
             f"at most sequence={spec.sequence}", spec.document_tokens)
        need(spec.cp == 1 and spec.attention != "unfused" and not spec.window,
             "document_tokens", "unset with context parallelism, unfused attention or a "
             "sliding window (not modelled)", spec.document_tokens)
    need(spec.lora_rank or set(spec.lora_targets) == set(LORA_TARGETS), "lora_targets",
         "unset without lora_rank (the layers LoRA adapts)", list(spec.lora_targets))
    need(spec.lora_rank or not spec.lora_a2a, "lora_a2a",
         "false without lora_rank (how LoRA's adapters exchange their output)", spec.lora_a2a)
    if spec.lora_rank:   # adapters on the dense layers
        for key, ok, expected in (
                ("lora_rank", spec.lora_rank % spec.tp == 0 or set(spec.lora_targets) <= set(
                    ROW_PARALLEL), f"a multiple of tp={spec.tp} with "
                 "linear_qkv or linear_fc1 adapted (a column-parallel layer's adapter splits "
                 "its rank over TP)"),
                ("experts", not spec.experts, "0 with lora_rank (adapters on dense layers)"),
                ("mla", spec.mla is None, "unset with lora_rank"),
                ("mtp_layers", not spec.mtp_layers, "0 with lora_rank"),
                ("fsdp", not spec.fsdp, "false with lora_rank")):
            need(ok, key, expected, getattr(spec, key))
    m = micro_batches(spec)
    group = spec.microbatch_group
    batch_key = "global_batch" if spec.global_batch else "micro_batches"
    counted = f"; global_batch / (micro_batch * dp) = {m}" if spec.global_batch else ""
    if spec.interleaved and not group:
        need(m % spec.pp == 0, batch_key,
             f"a multiple of pp={spec.pp} micro-batches per pipeline with the interleaved "
             f"schedule (Megatron-LM's requirement{counted})",
             spec.global_batch or spec.micro_batches)
    elif spec.interleaved:   # Megatron-Core's rules for its group (0.10 on)
        need(m >= spec.pp, batch_key, f"at least pp={spec.pp} micro-batches per pipeline "
             f"with the interleaved schedule{counted}", spec.global_batch or spec.micro_batches)
        need(spec.pp <= group <= m, "microbatch_group",
             f"from pp={spec.pp} to the {m} micro-batches per pipeline", group)
        need(m % group == 0 or m % group >= spec.pp, batch_key,
             f"micro-batches per pipeline a multiple of microbatch_group={group}, or leaving "
             f"at least pp={spec.pp} over (Megatron-Core's requirement{counted})",
             spec.global_batch or spec.micro_batches)
    else:
        need(not group, "microbatch_group", "unset without the interleaved schedule", group)
    if spec.schedule == "dualpipev":
        need(m >= 2 * spec.pp, batch_key, f"at least 2 pp = {2 * spec.pp} micro-batches per "
             f"pipeline with schedule dualpipev (DualPipeV's requirement{counted})",
             spec.global_batch or spec.micro_batches)
    per_layer = (30 if spec.recompute == "full" else 26 if spec.recompute ==
                 "every_other_matmul" else 22) + \
        (8 if spec.experts else 3) * spec.fsdp + \
        (7 if spec.recompute == "full" else 5) * spec.cp * (cp_kind(spec) == "p2p")
    # a multi-token prediction depth builds about what a layer does
    ops = m * (spec.layers + spec.mtp_layers) * per_layer + 8 * m * spec.pp * spec.vpp
    if ops > MAX_OPS:
        depths = f" and mtp_layers={spec.mtp_layers}" if spec.mtp_layers else ""
        raise ConfigError(f"{_where(src)}layers={spec.layers}{depths} over {m} micro-batches "
                          f"make a graph of about {ops} ops, more than {MAX_OPS}")


def cp_kind(spec: Any) -> str:
    """How context parallelism communicates in this spec: ``none`` (cp = 1), else its
    ``cp_comm_type``, except that Megatron's unfused attention (no ring kernel) all-gathers."""
    if spec.cp == 1:
        return "none"
    return "all_gather" if spec.attention == "unfused" else spec.cp_comm_type


def folds_experts(spec: Any) -> bool:
    """Whether expert parallelism is folded over context-parallel ranks, or over
    tensor-parallel ones when experts are not split over them (with neither, folding changes
    nothing, and the plain layout is used)."""
    return spec.expert_layout == "folded" and spec.ep > 1 and (
        spec.cp > 1 or (spec.expert_tp == 1 and spec.tp > 1))


def _folds(ep: int, sizes: tuple[int, ...]) -> bool:
    """Whether ``ep`` ranks are whole leading groups of ``sizes`` (innermost first) and a
    divisor of the next: the folded expert grid then splits where the dense one does."""
    for size in sizes:
        if ep <= size:
            return size % ep == 0
        if ep % size:
            return False
        ep //= size
    return ep == 1


def _where(source: str) -> str:
    """Message prefix naming the source of a value (none for Python arguments)."""
    return "" if source == "argument" else f"{source}: "


def _check_precisions(spec: Any, need: Need) -> None:
    """What Megatron-Core refuses of a precision per layer or module, and what flowsim does
    not price (:mod:`.transformer_precision`)."""
    per_stage = spec.layers // spec.pp
    for end in ("start", "end"):
        count = getattr(spec, f"bf16_layers_at_{end}")
        need(count <= per_stage or spec.fp8_recipe == "nvfp4", f"bf16_layers_at_{end}",
             f"at most the layers of a pipeline stage ({per_stage}), as Megatron-Core requires "
             "in FP8", count)
        need(count <= spec.layers, f"bf16_layers_at_{end}", f"at most the layers "
             f"({spec.layers})", count)
        need(not count or spec.dtype == "fp8", f"bf16_layers_at_{end}", "0 unless dtype is "
             "fp8, mxfp8 or nvfp4 (the layers left out of low precision)", count)
    mixed = spec.bf16_layers_at_start or spec.bf16_layers_at_end or spec.quant_recipe
    need(not (mixed and spec.dtype == "fp8" and spec.fp8_recipe == "delayed"), "fp8_recipe",
         "a current-scaling or block-scaled recipe with bf16_layers_at_start, "
         "bf16_layers_at_end or quant_recipe (Megatron-Core refuses delayed scaling with "
         "layers in BF16; a module's recipe beside it is not modelled)", spec.fp8_recipe)
    need(not (mixed and spec.roofline is not None), "roofline", "unset with "
         "bf16_layers_at_start, bf16_layers_at_end or quant_recipe (a roofline prices one "
         "precision)", "set")
    if spec.quant_recipe:
        need(spec.dtype in ("bf16", "fp8"), "dtype", "bf16, fp8, mxfp8 or nvfp4 with "
             "quant_recipe (Transformer Engine's autocast beside BF16)", spec.dtype)


def _check_recompute_modules(spec: Any, need: Need) -> None:
    """What Megatron-Core refuses of ``--recompute-modules``, and what flowsim does not price
    (:func:`.transformer_recompute.recompute_modules`)."""
    modules = spec.recompute_modules
    if not modules:
        return
    need(spec.recompute == "selective", "recompute_modules", "empty unless recompute is "
         "selective (Megatron-Core's --recompute-modules go with --recompute-granularity "
         "selective)", list(modules))
    need("mla_up_proj" not in modules or spec.mla is not None, "recompute_modules",
         "mla_up_proj only with multi-head latent attention (mla)", list(modules))
    need("moe_act" not in modules or spec.experts > 0, "recompute_modules",
         "moe_act only with experts", list(modules))
    need("moe" not in modules or not spec.moe_a2a_overlap, "recompute_modules", "without "
         "moe beside moe_a2a_overlap (Megatron-Core refuses it with its combined 1F1B)",
         list(modules))
    need(not ({"moe_act", "layernorm"} & set(modules) and spec.dtype == "fp8"
              and spec.fp8_recipe == "delayed"), "fp8_recipe", "a current-scaling or "
         "block-scaled recipe with moe_act or layernorm recomputed (Megatron-Core refuses "
         "delayed scaling with them)", spec.fp8_recipe)
