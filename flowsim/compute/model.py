"""A device's compute model: kernels in, nanoseconds out."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Protocol

from ..errors import FlowsimWarning
from ..workload.kernels import Attention, Elementwise, Gemm, HostCopy, Kernel, Quantize, Work
from .attention import attention_ns
from .devices import SUSTAINED, Device, device
from .gemm import gemm_ns
from .quantize import quantize_ns


class ComputeModel(Protocol):
    """What the engine asks of a compute model (a :class:`DeviceModel` or a
    :class:`~flowsim.workload.roofline.Roofline`)."""

    @property
    def peak_flops(self) -> float:
        """Dense peak FLOP/s of the device (BF16 for a device preset): the MFU's
        denominator."""

    def kernels_ns(self, kernels: Iterable[Kernel]) -> float:
        """Time of kernels run one after the other (ns)."""

    def work_ns(self, flops: float, mem_bytes: float) -> float:
        """Time of an op known only by its FLOPs and bytes (ns)."""


class DeviceModel:
    """Prices kernels on one device (memoised per kernel shape).

    Parameters
    ----------
    preset : Device or str
        The accelerator (see :data:`flowsim.compute.DEVICES`).
    sustained : float, optional
        Fraction of the kernel model's speed sustained in a training job (default
        :data:`~flowsim.compute.devices.SUSTAINED`, the calibrated constant; 1: kernels as
        measured in isolation).
    """

    def __init__(self, preset: Device | str, *, sustained: float | None = None) -> None:
        self.device = device(preset)
        self.sustained = sustained or self.device.sustained or SUSTAINED
        self._memo: dict[Kernel, float] = {}
        self._warned: set[str] = set()

    @property
    def peak_flops(self) -> float:
        """Dense BF16 peak FLOP/s (the convention of published MFU figures)."""
        return self.device.peak("bf16") * 1e9   # FLOP/ns -> FLOP/s

    def kernel_ns(self, kernel: Kernel) -> float:
        """Time of one kernel (ns)."""
        t = self._memo.get(kernel)
        if t is None:   # a copy to the host is the link's, not the GPU's sustained speed
            sustained = 1.0 if isinstance(kernel, HostCopy) else self.sustained
            t = self._memo[kernel] = self._price(kernel) / sustained
        return t

    def kernels_ns(self, kernels: Iterable[Kernel]) -> float:
        """Time of kernels run one after the other (ns)."""
        return sum(self.kernel_ns(k) for k in kernels)

    def work_ns(self, flops: float, mem_bytes: float) -> float:
        """Time of an op known only by its FLOPs and bytes (ns)."""
        return self.kernel_ns(Work(float(flops), float(mem_bytes)))

    def _price(self, kernel: Kernel) -> float:
        dev = self.device
        if isinstance(kernel, Gemm):
            # FP4 without FP4 tensor cores is refused by gemm_ns, not priced
            if kernel.dtype not in dict(dev.peak_tflops) and kernel.dtype != "fp4" \
                    and kernel.dtype not in self._warned:
                self._warned.add(kernel.dtype)   # once per device model and type
                warnings.warn(f"device {dev.name} has no {kernel.dtype} tensor cores: its "
                              f"{kernel.dtype} GEMMs are priced at its bf16 peak (Transformer "
                              f"Engine refuses FP8 below compute capability 8.9)",
                              FlowsimWarning, stacklevel=2)
            return gemm_ns(dev, kernel)
        if isinstance(kernel, Attention):
            return attention_ns(dev, kernel)
        if isinstance(kernel, Quantize):
            return quantize_ns(dev, kernel)
        if isinstance(kernel, HostCopy):   # GB/s is bytes per ns
            return kernel.bytes / dev.host_gbps
        memory = kernel.bytes / (dev.memory_gbps * dev.memory_efficiency)
        if isinstance(kernel, Elementwise):
            return memory + dev.launch_us * 1e3
        if isinstance(kernel, Work):   # a roofline at the device's GEMM rate
            from .gemm import asymptotic_efficiency

            compute = kernel.flops / (dev.peak("bf16") * asymptotic_efficiency(dev))
            return max(compute, memory) + dev.launch_us * 1e3
        raise TypeError(f"not a kernel: {kernel!r}")
