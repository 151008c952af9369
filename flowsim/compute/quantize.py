"""Time of low-precision training's casts (:class:`~flowsim.workload.kernels.Quantize`) on a
device.

A cast is memory-bound: its traffic (:func:`~flowsim.workload.kernels.quantize_bytes`) at the
device's memory rate, plus a kernel launch. What the device changes is which copies are
written: Blackwell (compute capability 10) runs FP8 GEMMs on operands in any layout, so a
tensor-scaled cast writes no transpose, and only Blackwell has tensor cores that apply
MXFP8's and NVFP4's block scales (Transformer Engine refuses both recipes below it).
"""

from __future__ import annotations

from ..errors import config_error
from ..workload.kernels import BLOCK_SCALED_RECIPES, Quantize, quantize_bytes
from .devices import Device

#: the first compute capability with FP8 GEMMs on operands in any layout and MXFP8 and NVFP4
#: block scaling in the tensor cores (Blackwell, sm_100)
BLACKWELL = (10, 0)


def quantize_ns(device: Device, quantize: Quantize) -> float:
    """Time of ``quantize`` on ``device`` (ns).

    Raises
    ------
    ConfigError
        For the ``mxfp8`` and ``nvfp4`` recipes on a device older than Blackwell.
    """
    blackwell = device.compute_capability >= BLACKWELL
    if quantize.recipe in BLOCK_SCALED_RECIPES and not blackwell:
        raise config_error(f"device {device.name!r}", "fp8_recipe",
                           f"delayed or tensorwise ({quantize.recipe.upper()} needs Blackwell "
                           "tensor cores, compute capability 10.0 or later; so does a "
                           "quant_recipe rule that asks for it)", quantize.recipe)
    traffic = quantize_bytes(quantize, any_layout=blackwell)
    return traffic / (device.memory_gbps * device.memory_efficiency) + device.launch_us * 1e3
