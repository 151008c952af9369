"""What a transformer layer's linear layers keep of their inputs for their weight gradients,
in bytes per element (:class:`Saved`): the 16-bit input, or in FP8 and NVFP4 the column-wise
copy of the input Transformer Engine quantized (``Linear``, ``LayerNormLinear`` and
``GroupedLinear`` discard the row-wise data: ``module/linear.py``,
``module/layernorm_linear.py`` and ``module/grouped_linear.py`` at d0067d0da), each module in
its own precision. The memory estimate (:mod:`.transformer_activations`) and the
fine-grained offloading's copies (:mod:`.transformer_module_offload`) read it alike.
"""

from __future__ import annotations

from typing import NamedTuple

from . import transformer_values as tv
from .transformer_precision import precision_of
from .transformer_shapes import ACT
from .transformer_spec import TransformerSpec


class Saved(NamedTuple):
    """Bytes per element of the inputs a layer's linear layers keep for their weight
    gradients, each in its module's precision (:func:`.transformer_values.low_bytes`)."""

    qkv: float
    proj: float   # its own copy beside the attention's output (delayed scaling), or that
    fc1: float
    fc2: float
    experts_fc1: float
    experts_fc2: float
    shared_fc1: float   # the same beside the norm's 16-bit output the router reads
    shared_fc2: float
    latent_down: float   # its own copy beside that output, always, when quantized
    latent_up: float
    in_proj: float


#: the module of each of :class:`Saved`'s fields (Megatron-Core's names)
_SAVED_MODULES = {"qkv": "self_attention.linear_qkv", "proj": "self_attention.linear_proj",
                  "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2",
                  "experts_fc1": "mlp.experts.linear_fc1",
                  "experts_fc2": "mlp.experts.linear_fc2",
                  "shared_fc1": "mlp.shared_experts.linear_fc1",
                  "shared_fc2": "mlp.shared_experts.linear_fc2",
                  "latent_down": "mlp.fc1_latent_proj", "latent_up": "mlp.fc2_latent_proj",
                  "in_proj": "mixer.in_proj"}


def saved_inputs(spec: TransformerSpec) -> Saved:
    """What ``spec``'s linear layers keep of their inputs (``spec``: a layer's, as
    :meth:`~.transformer_kernels.LayerKernels.of_layer` resolves it).

    Megatron-Core has the projection, the shared experts' FC1 and (when ``expert_fc1`` is
    offloaded under tensor scaling) the experts' FC1 keep their 16-bit input instead of a
    quantized copy under every recipe but delayed scaling (``set_save_original_input``:
    ``attention.py``, ``shared_experts.py``, ``experts.py`` at d98e8a64d), the tensor the
    attention or the router already keeps. Under sequence parallelism an NVFP4
    ``LayerNormLinear`` keeps both layouts of its norm output for the gather
    (``layernorm_linear.py``). Under FP8 attention the projection is counted as reading the
    attention's 16-bit output. torchao's ``Float8Linear`` (``fp8_library: torchao``) keeps
    its 16-bit input (``matmul_with_hp_or_float8_args.forward``: ``save_for_backward(
    input_hp, weight_hp_t)``)."""
    if spec.fp8_library == "torchao":   # Float8Linear saves its high-precision input
        return Saved(*(ACT for _ in _SAVED_MODULES))
    sizes = {name: tv.low_bytes(*precision_of(spec, module))
             for name, module in _SAVED_MODULES.items()}
    if spec.fp8_recipe != "delayed" or spec.fp8_attention:
        sizes.update(proj=ACT, shared_fc1=ACT)
    if "expert_fc1" in spec.offload_modules and spec.fp8_recipe not in ("mxfp8", "nvfp4"):
        sizes.update(experts_fc1=ACT)
    if spec.sp and spec.tp > 1:   # NVFP4's norm outputs gathered: both layouts kept
        for name in ("qkv", "fc1", "in_proj"):
            if precision_of(spec, _SAVED_MODULES[name]) == ("fp8", "nvfp4"):
                sizes[name] *= 2
    return Saved(**sizes)
