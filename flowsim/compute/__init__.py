"""Compute models: how long a workload's kernels take on an accelerator.

:class:`DeviceModel` prices kernels from their shapes on a :class:`Device` preset (GEMM tiles
and waves, fused attention by its mask, sequence and head dimension
(:mod:`~flowsim.compute.attention`), FP8 and NVFP4 casts by recipe and GPU generation
(:mod:`~flowsim.compute.quantize`), memory-bound kernels); the workload layer's
:class:`~flowsim.workload.roofline.Roofline` is the simpler alternative.
"""

from .devices import DEVICES, Device, device
from .model import ComputeModel, DeviceModel

__all__ = ["DEVICES", "ComputeModel", "Device", "DeviceModel", "device"]
