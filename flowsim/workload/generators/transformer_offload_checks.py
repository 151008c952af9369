"""What fine-grained activation offloading (``offload_modules``:
:mod:`.transformer_module_offload`) refuses, as Megatron-Core's ``TransformerConfig`` does
(Megatron-LM 24bad8e67), for :func:`~.transformer_checks.check_consistent`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .transformer_choices import OFFLOAD_GROUPS


def check_offload_modules(spec: Any, need: Callable[..., None]) -> None:
    """What Megatron-Core's ``TransformerConfig`` refuses of fine-grained offloading; and
    what flowsim does not price: the experts' modules without experts (they name nothing),
    offloading under full recomputation (a checkpointed layer saves only its input), and
    ``expert_fc1`` or ``moe_act`` beside ``fused_grouped_mlp`` (Megatron-Core then runs the
    experts unfused)."""
    modules = set(spec.offload_modules)
    experts = modules & OFFLOAD_GROUPS["experts"]
    fused = "fused_group_mlp" in modules
    need(not modules or not spec.cpu_offload_layers, "offload_modules",
         "[] with cpu_offload_layers", sorted(modules))
    need(not modules or spec.recompute != "full", "offload_modules",
         "[] with recompute: full (a checkpointed layer keeps only its input)",
         sorted(modules))
    need("attn_proj" not in modules or "core_attn" in modules, "offload_modules",
         "core_attn beside attn_proj (its input is core_attn's output)", sorted(modules))
    need(not experts or (spec.experts > 0 and "moe" not in spec.recomputed_modules),
         "offload_modules", "expert modules only with experts, and not with "
         "recompute_modules moe (it re-runs the whole mixture of experts)", sorted(modules))
    need(not fused or spec.fused_grouped_mlp, "fused_grouped_mlp",
         "true with offload_modules fused_group_mlp (Transformer Engine's fused grouped MLP)",
         spec.fused_grouped_mlp)
    need(experts <= {"fused_group_mlp"} or not (fused or spec.fused_grouped_mlp),
         "offload_modules", "expert_fc1 or moe_act only without fused_group_mlp and without "
         "fused_grouped_mlp (beside it Megatron-Core runs the experts unfused, which is not "
         "priced)", sorted(modules))
