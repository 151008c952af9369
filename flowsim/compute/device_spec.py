"""The accelerator model: the published facts a compute model needs about one device
(:class:`Device`), the compute model's calibrated constant, and the host links presets
share. The presets themselves are in :mod:`.devices` and :mod:`.devices_blackwell`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import config_error
from .attention_kernels import ATTENTION_KERNELS

#: The calibrated constant of the compute model: kernels in a training job run at this fraction of
#: what the kernel model (MAMF-derived GEMM tiles, published attention and memory rates, measured in
#: isolation) predicts — clocks held lower under the job's power and heat, communication kernels
#: sharing the SMs, launch gaps between kernels. It is set once, for every device without a constant
#: of its own (H100, GB200, B200, GB300 and B300 have theirs: :data:`H100_SUSTAINED`,
#: :data:`GB200_SUSTAINED`, :data:`B200_SUSTAINED`, :data:`GB300_SUSTAINED`,
#: :data:`B300_SUSTAINED`), from one source:
#: the four iteration times of Korthikanti et al.,
#: "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023), Tables 3 and 5 (22B
#: and 175B, selective and full recomputation; 8 and 64 A100s, no data parallelism), rounded: 0.8
#: leaves their median error at +0.9% (errors -3.6%, -0.2%, +2.0%, +4.1%;
#: ``scripts/validate_published.py --only korthikanti22_ --sustained X`` re-derives it) with every
#: other number public. Every other published run is validated with it unchanged.
SUSTAINED = 0.8



@dataclass(frozen=True, kw_only=True)
class Device:
    """One accelerator model.

    Attributes
    ----------
    name : str
    sms : int
        Streaming multiprocessors (the units GEMM tiles are spread over).
    peak_tflops : tuple of (dtype, float)
        Dense tensor-core peak per data type (TFLOP/s, 10^12).
    memory_gbps : float
        Device memory bandwidth (GB/s, 10^9 B/s).
    memory_gb : float
        Device memory size (GB).
    mamf_tflops : float
        Best measured BF16 GEMM throughput (TFLOP/s) ...
    mamf_shape : tuple of int
        ... and the ``(m, n, k)`` it was measured at.
    fp8_gemm_ratio : float
        The best FP8 GEMM's fraction of the FP8 peak over the best BF16 GEMM's fraction of
        the BF16 peak (1: FP8 GEMMs reach the BF16 fraction).
    attention_forward : float
        Fraction of the 16-bit peak a fused attention forward pass reaches on long sequences.
    attention_backward : float
        The same for its backward pass.
    attention_kernel : str
        Which kernel ``attention_forward`` and ``_backward`` measure: ``flash2``
        (FlashAttention-2) or ``cudnn`` (cuDNN's fused attention); it sets how the rate
        changes with the head dimension (:data:`flowsim.compute.attention_kernels.HEAD_DIMS`).
    flash2_forward, flash2_backward : float
        The same for FlashAttention-2 on a device whose best kernel is newer (0: the device's
        best kernel is FlashAttention-2).
    fp8_attention : str
        Whose measurement of FP8 attention's speed-up over BF16 the device takes
        (:data:`flowsim.compute.attention_fp8.TABLES`; empty: none, FP8 attention refused).
    attention_block_keys : float
        Fixed work of one thread block of the fused attention kernel (loading its queries,
        the final rescaling and write-out), in keys of its loop (:mod:`.attention`; the
        default, 198, is fitted to the FlashAttention-3 paper's H100 curves).
    memory_efficiency : float
        Fraction of ``memory_gbps`` memory-bound kernels reach.
    launch_us : float
        Fixed cost of one kernel (launch, ramp-up and tail), µs.
    host_gbps : float
        GB/s (10^9 B/s) one GPU copies to or from host memory, each way, while every GPU of
        its node does (activation offloading): :data:`PCIE_GEN5_X16` unless set.
    sustained : float
        Fraction of the kernel model's speed a GPU sustains inside a training job (see
        :data:`SUSTAINED`).
    compute_capability : tuple of int
        CUDA's ``(major, minor)``: 9.0 Hopper, 10.x Blackwell, whose FP8 GEMMs take any
        operand layout and MXFP8's block scales (:mod:`.quantize`).
    source : str
        Where the numbers come from.
    """

    name: str
    sms: int
    peak_tflops: tuple[tuple[str, float], ...]
    memory_gbps: float
    memory_gb: float
    mamf_tflops: float
    mamf_shape: tuple[int, int, int]
    fp8_gemm_ratio: float = 1.0
    attention_forward: float
    attention_backward: float
    attention_kernel: str = "flash2"
    flash2_forward: float = 0.0
    flash2_backward: float = 0.0
    attention_block_keys: float = 198.0
    fp8_attention: str = ""
    memory_efficiency: float = 0.9
    launch_us: float = 4.0
    host_gbps: float = 63.0
    sustained: float = field(default=0.0, compare=False)
    compute_capability: tuple[int, int] = (8, 0)
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise config_error(f"Device {self.name!r}", "attention_kernel",
                               "one of " + ", ".join(ATTENTION_KERNELS), self.attention_kernel)
        keys = self.attention_block_keys
        if not (math.isfinite(keys) and keys >= 0):   # a block's time stays positive, finite
            raise config_error(f"Device {self.name!r}", "attention_block_keys",
                               "a finite number of keys >= 0", keys)

    def peak(self, dtype: str) -> float:
        """Dense peak for ``dtype`` in FLOP/ns (16-bit peak for types the device lacks)."""
        peaks = dict(self.peak_tflops)
        return (peaks.get(dtype) or peaks["bf16"]) * 1e3


def _with_fp4(peaks: tuple[tuple[str, float], ...],
              fp4: float) -> tuple[tuple[str, float], ...]:
    """``peaks`` (which carry an FP4 peak) with that peak replaced by ``fp4``."""
    assert any(dtype == "fp4" for dtype, _ in peaks)
    return tuple((dtype, fp4 if dtype == "fp4" else peak) for dtype, peak in peaks)


#: a GPU's host link, GB/s each way: PCIe Gen4 and Gen5 x16 (16 and 32 GT/s per lane,
#: 128b/130b; a PCIe switch whose uplink two GPUs share would halve it: not modelled)
PCIE_GEN4_X16 = 31.5
PCIE_GEN5_X16 = 63.0
#: GB200's and GB300's: each GPU's NVLink-C2C link to its Grace (900 GB/s both ways, 450
#: each: Transformer Engine's CPU-offloading guide), but the two GPUs of a superchip share
#: their Grace's LPDDR5X (about 500 GB/s: half the Grace CPU Superchip's 1 TB/s), the bound
GRACE_HOST_GBPS = min(450.0, 500.0 / 2)
