"""Recomputation of parts of a layer before its backward (the rest of ``recompute``'s kinds:
``full`` re-runs :meth:`~.transformer_passes.PassBuilder.forward`, the core attention is
re-run inside :meth:`~.transformer_passes.PassBuilder.backward`).

* ``recompute: selective`` with ``recompute_modules`` (Megatron-Core's ``--recompute-modules``,
  ``transformer/transformer_layer.py``, ``moe/moe_layer.py``, ``moe/experts.py``,
  ``multi_latent_attention.py`` at d98e8a64d): a mixture of experts whole (``moe``: router,
  dispatch, experts, combine and shared experts, its checkpointed forward), or its experts'
  activation, with FC2's input cast again from it in low precision (``moe_act``), and its
  shared experts (``shared_experts``; under ``fused_grouped_mlp`` Transformer Engine's fused
  MLP rebuilds FC2's input inside its activation's backward kernel: nothing runs apart,
  ``ScaledSReLU(activation_recompute_in_mlp=True)``); a dense MLP with its collectives
  (``mlp``); latent
  attention's up projections and rotation (``mla_up_proj``); and the norms that are modules
  of their own (``layernorm``: a mixture of experts' pre-MLP norm, latent attention's input
  norm; Transformer Engine fuses the others into the next linear layer, leaving nothing to
  re-run). Each runs before the layer's backward; Megatron-Core re-runs it before its own
  module's backward, on the same stream. Not modelled: the modules of multi-token prediction
  depths (only their core attention is re-run), and with context parallelism the core
  attention's exchanges (its kernels alone are re-run).
* ``recompute: every_other_matmul``: torchtitan's per-op policy
  (:attr:`~.transformer_kernels.LayerKernels.alternate_matmuls`).
"""

from __future__ import annotations

from .transformer_mla import LatentKernels
from .transformer_overlap import Frontier
from .transformer_passes import PassBuilder


def recompute_modules(b: PassBuilder, layer: int, tag: str) -> Frontier:
    """The modules ``recompute_modules`` names, of ``layer``, re-run after the stream's
    previous op (none: ``()``). Under ``moe`` the experts' activation (``moe_act``) and the
    shared experts (``shared_experts``) run once more, as their own checkpoints inside the
    re-run mixture of experts re-run them before their backward."""
    s, modules = b.spec, b.spec.recomputed_modules
    k, name = b.k.of_layer(layer), f"{tag}.recompute.layer{layer}"
    start: Frontier = () if b.last is None else (b.last,)
    out = start
    if s.has_mlp(layer) and s.is_moe(layer):
        # (a fused grouped MLP rebuilds FC2's input inside its activation's backward kernel)
        again = "moe_act" in modules and not s.fused_grouped_mlp
        kernels = (k.norm if "layernorm" in modules else ()) + \
            (k.expert_activation_again if again else ())
        if "moe" in modules:
            out = b.moe_forward(f"{name}.moe", layer, out)
        if kernels:
            out = (b.compute(f"{name}.moe.parts", kernels, layer, "fwd", out),)
        shared = k.shared_expert
        if "shared_experts" in modules and shared is not None:
            out = b.mlp_forward(f"{name}.shared_expert", shared, layer, out)
    elif s.has_mlp(layer) and "mlp" in modules:
        out = b.mlp_forward(f"{name}.mlp", k, layer, out)
    if s.mixer(layer) == "attention" and isinstance(k, LatentKernels):
        kernels = (k.norm if "layernorm" in modules else ()) + \
            (k.qkv + k.rope if "mla_up_proj" in modules else ())
        if kernels:
            out = (b.compute(f"{name}.attention", kernels, layer, "fwd", out),)
    return () if out == start else out


def recompute_matmuls(b: PassBuilder, layer: int, tag: str) -> Frontier:
    """``recompute: every_other_matmul`` before ``layer``'s backward: the kernels of
    :attr:`~.transformer_kernels.LayerKernels.alternate_matmuls` after the stream's previous
    op; with sequence parallelism each side's input is gathered again first (the policy
    saves reduce-scatters, not all-gathers)."""
    k, name = b.k.of_layer(layer), f"{tag}.recompute.layer{layer}"
    attention, mlp = k.alternate_matmuls
    if not (b.spec.sp and b.spec.tp > 1):
        return (b.compute(name, attention + mlp, layer, "fwd"),)
    x: Frontier = () if b.last is None else (b.last,)
    for side, kernels in (("attention", attention), ("mlp", mlp)):
        x = (b.collective(f"{name}.{side}.input.all_gather", "all_gather", k.gather_bytes,
                          b.groups.tp, layer, "fwd", x),)
        x = (b.compute(f"{name}.{side}", kernels, layer, "fwd", x),)
    return x
