"""Accelerators: the published facts a compute model needs, one preset per device.

Every number is a public specification or a public measurement, set once per device and never
adjusted to a training run (sources beside each preset):

* dense tensor-core peaks per data type, SM count and memory bandwidth: NVIDIA's datasheets
  (A100: 312 TFLOP/s 16-bit, 108 SMs, 2,039 GB/s HBM2e on the 80 GB SXM4 part; H100 SXM5:
  989.4 TFLOP/s BF16 dense, 1,978.9 FP8, 132 SMs, 3.35 TB/s HBM3); for the Blackwell GPU of
  a GB200 superchip, the dense peaks and memory of ml-engineering's "TFLOPS comparison
  table" and memory table (2,500 TFLOP/s BF16, 5,000 FP8, 186 GB at 8 TB/s) and B200's 148
  SMs; for the B200 SXM of an HGX or DGX B200, the same tables (2,250 TFLOP/s BF16, 4,500
  FP8, 180 GB at 8 TB/s, 148 SMs); Blackwell Ultra's GB300 and B300 SXM are GB200's and
  B200's peaks and SMs with 288 GB (:data:`GB300`, :data:`B300_SXM`); H200 SXM and H800 SXM
  are H100 SXM's die at its clocks
  (H200: 141 GB of HBM3e at 4.8 TB/s; H800: NVLink and FP64 cut, neither a compute fact here);
  Blackwell's dense FP4 peaks (NVFP4's GEMMs), the same table's ``fp4`` column: GB200 10,000
  TFLOP/s, B200 9,000, and Blackwell Ultra's, faster at the same BF16 and FP8 peaks: GB300
  15,000, B300 12,600;
* the *maximum achievable matmul FLOPS* (MAMF), the best BF16 GEMM throughput found by a brute-force
  shape search, and that shape: S. Bekman, *Machine Learning Engineering*, "Maximum Achievable
  Matmul FLOPS comparison table" (github.com/stas00/ml-engineering,
  ``compute/accelerator/README.md``): A100 SXM 267.9 TFLOP/s at 6912x16384x2048 (CUDA 12.1), H100
  SXM 792.1 TFLOP/s at 6144x17920x2816 (CUDA 12.1); GB200 1,822.0 at 4096x9728x2048 (CUDA 13.0);
  B200 SXM 1,745.0 at 1792x16128x3072 (torch 2.7.1+cu128); B300 SXM 1,769.0 at 12288x18432x1024
  (torch 2.9.1+cu130). The GEMM model's asymptotic efficiency is derived from it
  (:func:`flowsim.compute.gemm.asymptotic_efficiency`). FP8 GEMMs reach a smaller fraction of their
  peak: the same table's best FP8 (``float8_e4m3fn``) GEMM against its best BF16 GEMM, both measured
  with the same software, gives the ratio of the two fractions (H100 SXM: 70.9% / 80.3% = 0.883 with
  torch 2.7.0+cu126; GB200: 72.3% / 72.9% = 0.992 with torch 2.10.0+cu130; B200: 76.3% / 77.6% =
  0.984 with torch 2.7.1+cu128; B300: 74.5% / 78.6% = 0.948 with torch 2.9.1+cu130),
  :attr:`Device.fp8_gemm_ratio`;
* fused attention throughput, of the kernel Transformer Engine runs (its
  ``DotProductAttention`` picks cuDNN's fused attention over FlashAttention on Hopper and
  newer "for performance reasons", from TE 1.4 on, and FlashAttention on Ampere): on A100,
  Dao, "FlashAttention-2" (arXiv 2307.08691, 2023), section 4.1: "up to 230 TFLOPs/s, 73%
  of the theoretical maximum" (forward and backward together; the backward runs at about
  2/3 of the forward's rate in its figures); on H100, cuDNN's in the speed figures of Shah
  et al., "FlashAttention-3" (arXiv 2407.08608, 2024) at head dimension 128 (that of nearly
  every LLM) and 16K tokens: 595 TFLOP/s forward (0.601 of the BF16 peak), 516 backward
  (0.522), and, for FlashAttention-2 (``attention: flash2``), 370 and 322 (0.374, 0.325);
  FlashAttention-3 itself reaches 648 and 561 there (not a preset: Transformer Engine does
  not pick it); on Blackwell, cuDNN's own speed curve on B200, forward and backward from
  512 to 128K tokens (NVIDIA's cuDNN frontend repository, ``benchmark/
  sdpa_benchmark_bf16_training``, cuDNN 9.10.2 in NGC PyTorch 25.05, of the same spring as
  the NeMo 25.02-25.04 Blackwell runs validated), to which ``scripts/fit_attention.py``
  fits the attention model: 0.692 of the BF16 peak forward, 0.552 backward, and 757 keys
  of fixed work per thread block (:attr:`Device.attention_block_keys`; 198 on Hopper and
  Ampere, from the FlashAttention-3 paper's H100 curves). GB200 runs the same kernel at
  the same fractions of its own peak (an assumption: its published curve, from cuDNN 9.17
  in December 2025, is 8% faster at 16K tokens, newer software); Blackwell Ultra (GB300,
  B300) at those rates times its speed-up over GB200 in cuDNN's same-day curves of both
  (April 2026): 0.826 forward, 0.618 backward;
* memory-bound kernels reach about 90% of the HBM bandwidth (a device-to-device copy: e.g.
  3.57 of 3.94 TB/s measured on an H100 NVL, ml-engineering's benchmark notes); kernel
  launch and tail costs of a few microseconds per kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..device_names import ALIASES, preset_name
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
A100_SXM_80GB = Device(
    name="a100_sxm_80gb", sms=108, host_gbps=PCIE_GEN4_X16,
    peak_tflops=(("bf16", 312.0), ("fp16", 312.0), ("tf32", 156.0), ("fp32", 19.5)),
    memory_gbps=2039.0, memory_gb=80.0, mamf_tflops=267.9, mamf_shape=(6912, 16384, 2048),
    attention_forward=0.73, attention_backward=0.55,
    source="NVIDIA A100 datasheet; MAMF: ml-engineering accelerator table (CUDA 12.1); "
           "attention: FlashAttention-2 sec. 4.1")
A100_SXM_40GB = Device(
    name="a100_sxm_40gb", sms=108, host_gbps=PCIE_GEN4_X16,
    peak_tflops=A100_SXM_80GB.peak_tflops, memory_gbps=1555.0, memory_gb=40.0,
    mamf_tflops=267.9, mamf_shape=(6912, 16384, 2048), attention_forward=0.73,
    attention_backward=0.55,
    source="NVIDIA A100 datasheet (HBM2, 1,555 GB/s); compute as the 80 GB part")
#: H100's own sustained fraction, set the way GB200's is (:data:`GB200_SUSTAINED`): from the
#: same recipe release and model, NVIDIA's DGX Cloud recipes v25.05 on H100, Nemotron-4 340B
#: in BF16 (256 GPUs, global batch 64: 4.606 s per step, NeMo 25.04), which 0.74 predicts
#: within 0.2% (``validate_published.py --only dgxc2505_nemotron4_340b_bf16_256gpu
#: --sustained X``; it was 0.77 until the row reduced its gradients in BF16, as the
#: recipe's performance mode does, and 0.76 until the distributed optimizer's parameter
#: gathers overlapped the forward bucket by bucket, as Megatron-Core's do); every other
#: H100 run is validated with it unchanged.
#: Until it was set, H100 took A100's 0.8, and its 65 published runs came out fast by a
#: median of 6.9% (A100's 26 by 3.1%): inside a training job an H100 keeps a smaller share
#: of its isolated-kernel speed than an A100 does.
H100_SUSTAINED = 0.74
H100_SXM_80GB = Device(
    name="h100_sxm_80gb", sms=132,
    peak_tflops=(("bf16", 989.4), ("fp16", 989.4), ("fp8", 1978.9), ("tf32", 494.7),
                 ("fp32", 66.9)),
    memory_gbps=3350.0, memory_gb=80.0, mamf_tflops=792.1, mamf_shape=(6144, 17920, 2816),
    fp8_gemm_ratio=round(1402.6 / 1978.9 / (794.5 / 989.4), 3),
    attention_forward=round(595 / 989.4, 3), attention_backward=round(516 / 989.4, 3),
    attention_kernel="cudnn",
    flash2_forward=round(370 / 989.4, 3), flash2_backward=round(322 / 989.4, 3),
    sustained=H100_SUSTAINED, compute_capability=(9, 0),
    source="NVIDIA H100 datasheet; MAMF: ml-engineering accelerator table (CUDA 12.1); "
           "attention: cuDNN's and FlashAttention-2's in the FlashAttention-3 paper's figures")

#: H200 SXM: H100's GH100 die at H100's clocks (the same peaks, SMs and attention kernels)
#: with 141 GB of HBM3e at 4.8 TB/s; its sustained fraction is H100's, the same silicon on
#: the same software (an assumption: no published H200 training run pins its own)
H200_SXM_141GB = replace(
    H100_SXM_80GB, name="h200_sxm_141gb", memory_gbps=4800.0, memory_gb=141.0,
    fp8_gemm_ratio=round(1453.4 / 1978.9 / (794.5 / 989.4), 3),
    source="NVIDIA H200 datasheet (141 GB HBM3e, 4.8 TB/s; compute as H100 SXM); MAMF: "
           "ml-engineering accelerator tables (BF16: 'H200 is the same' as H100; FP8 "
           "1,453.4 TFLOP/s, torch 2.7.1+cu128); sustained fraction H100's")
#: H800 SXM: H100 SXM for export markets, the same die, clocks, memory and tensor-core peaks
#: (its NVLink and FP64 are cut: the one is the cluster's, flowsim prices no FP64)
H800_SXM_80GB = replace(
    H100_SXM_80GB, name="h800_sxm_80gb",
    source="H100 SXM's compute and memory (NVIDIA's H800 differs in NVLink, 400 GB/s "
           "bidirectional, and FP64); sustained fraction H100's")

#: cuDNN's fused attention on Blackwell, fitted to its published B200 curve
#: (``scripts/fit_attention.py``; the module docstring): forward and backward rates (fractions
#: of the BF16 peak) and fixed work per block (keys)
BLACKWELL_ATTENTION_FORWARD = 0.692
BLACKWELL_ATTENTION_BACKWARD = 0.552
BLACKWELL_BLOCK_KEYS = 757.0

#: GB200's own sustained fraction, from one source: the one bubble-free, compute-bound run of
#: NVIDIA's DGX Cloud recipes v25.05 on GB200 (Nemotron-4 340B, BF16, 128 GPUs, global batch
#: 512: 32.66 s per step, NeMo 25.04), which 0.59 predicts within 0.6%
#: (``validate_published.py --only dgxc_gb200_nemotron4_340b_bf16_128gpu_strong --sustained
#: X``; it was 0.56, then 0.59 once the run's TP communication overlap was priced, then 0.58
#: once cuDNN's backward attention took H100's backward-to-forward ratio, then 0.59 again
#: once Blackwell's attention took cuDNN's published B200 curve, each re-derived the same
#: way); every other GB200 run is validated with it unchanged. It is far below A100's
#: 0.8 and H100's 0.74: that software (April 2025) ran GB200 at about 50% MFU, against its
#: measured best GEMM of 73% of peak. Newer software is faster; the constant says what was
#: measured.
GB200_SUSTAINED = 0.59
GB200 = Device(
    name="gb200", sms=148,
    peak_tflops=(("bf16", 2500.0), ("fp16", 2500.0), ("fp8", 5000.0), ("fp4", 10000.0),
                 ("tf32", 1250.0), ("fp32", 80.0)),
    memory_gbps=8000.0, memory_gb=186.0, mamf_tflops=1822.0, mamf_shape=(4096, 9728, 2048),
    fp8_gemm_ratio=round(3615.6 / 5000.0 / (1822.0 / 2500.0), 3),
    attention_forward=BLACKWELL_ATTENTION_FORWARD,
    attention_backward=BLACKWELL_ATTENTION_BACKWARD,
    attention_block_keys=BLACKWELL_BLOCK_KEYS, attention_kernel="cudnn", fp8_attention="gb200",
    sustained=GB200_SUSTAINED, compute_capability=(10, 0), host_gbps=GRACE_HOST_GBPS,
    source="one B200 of a GB200 superchip; ml-engineering accelerator tables (peaks, memory, "
           "MAMF with CUDA 13.0); attention: cuDNN's B200 curve (cudnn-frontend benchmark, "
           "cuDNN 9.10.2) at GB200's peak")

#: B200's own sustained fraction, set the way GB300's is (:data:`GB300_SUSTAINED`), from
#: NVIDIA's pair of one benchmark, configuration and software on B200 and GB200: MLPerf
#: Training v5.0, Llama 2 70B LoRA on 8 GPUs, TP 1, NGC 25.04 (B200 ``nyx`` 1.512 s per
#: step, GB200 ``tyche`` 1.485 s). 0.65 is the X at which ``validate_published.py --only
#: mlperf50_b200_llama2_70b_lora_8gpu_nyx --sustained X`` gives the B200 row GB200's row's
#: error at GB200's constant (+11.6% and +12.2%; 0.64: +13.3%); the other compute-bound
#: pairs of one release imply 0.64-0.66 (NVFP4's 0.59-0.60). At GB200's 0.59, B200's 72 runs
#: came out slow by a median 21.6%: inverting the tile model at each GPU's best-GEMM shape
#: (GB200's loses 9% to a partial wave in the model, B200's under 1%) lifts GB200's mainloop
#: rate 21% above its measured best, B200's 9%, and the constant carries that.
B200_SUSTAINED = 0.65
B200_SXM = Device(
    name="b200_sxm", sms=148,
    peak_tflops=(("bf16", 2250.0), ("fp16", 2250.0), ("fp8", 4500.0), ("fp4", 9000.0),
                 ("tf32", 1125.0), ("fp32", 80.0)),
    memory_gbps=8000.0, memory_gb=180.0, mamf_tflops=1745.0, mamf_shape=(1792, 16128, 3072),
    fp8_gemm_ratio=round(3432.5 / 4500.0 / (1745.0 / 2250.0), 3),
    attention_forward=BLACKWELL_ATTENTION_FORWARD,
    attention_backward=BLACKWELL_ATTENTION_BACKWARD,
    attention_block_keys=BLACKWELL_BLOCK_KEYS, attention_kernel="cudnn", fp8_attention="gb200",
    sustained=B200_SUSTAINED, compute_capability=(10, 0),
    source="B200 SXM; ml-engineering accelerator tables (peaks, memory, MAMF with torch "
           "2.7.1+cu128); attention: cuDNN's B200 curve (cudnn-frontend benchmark, cuDNN "
           "9.10.2); sustained fraction from the MLPerf v5.0 B200 / GB200 LoRA pair")

#: Blackwell Ultra (B300, GB300) runs cuDNN's attention faster than Blackwell at the same
#: peak: its special-function units compute exponentials twice as fast, and the softmax's
#: are what bound the kernel. NVIDIA measured both the same day with the same cuDNN (9.22,
#: April 2026) on a GB200 and a GB300 (the same BF16 peak); the GB300's rate over the
#: GB200's, the geometric mean over 2K to 32K tokens, causal (1.19 forward, 1.12 backward;
#: ``scripts/fit_attention.py`` derives it), scales Blackwell's fitted rates: the software
#: stays that of the Blackwell fit, the software of the runs GB200's constant was set on.
BLACKWELL_ULTRA_ATTENTION_FORWARD = 0.826
BLACKWELL_ULTRA_ATTENTION_BACKWARD = 0.618

#: GB300's own sustained fraction, from GB200's and the one pair of runs NVIDIA published of
#: one model and layout family on both in one release: Megatron-Bridge 26.04, Llama 3.1 405B
#: in FP8 on 256 GPUs (GB300: 1,036 tokens/s per GPU, TP 4 x PP 8; GB200: 842, TP 4 x PP
#: 16). GB300 ran it 1.23 times as fast; at GB200's constant flowsim gives 1.02 (the same
#: peaks and GEMMs: what differs, a 1.4 kW budget against 1.2 kW, is in no kernel
#: measurement). 0.71 makes flowsim's ratio the published one: the X at which
#: ``validate_published.py --only mbridge2604_gb300 --sustained X`` gives the GB300 row the
#: error ``--only mbridge2604_gb200`` gives the GB200 row at GB200's constant (+10.3% and
#: +9.7%; 0.72 gives +8.8%), so GB300 keeps GB200's software of 2025 and only the
#: hardware's gain is read from the pair. The GB300 row is the constant's source, not a
#: check of it.
GB300_SUSTAINED = 0.71

#: GB300 (Blackwell Ultra of a GB300 NVL72 rack): GB200's BF16 and FP8 peaks and clocks,
#: 148 SMs enabled (of the full die's 160 in NVIDIA's "Inside NVIDIA Blackwell Ultra"; as on
#: B200, programs on GB300 and B300 report 148), 288 GB of HBM3e at 8 TB/s (NVIDIA's GB300
#: NVL72 specifications; ml-engineering's tables: "the same but faster fp4 and more memory").
#: Its dense FP4 peak is 15,000 TFLOP/s (the same tables), 1.5 times GB200's.
#: No MAMF is published for it; a Blackwell Ultra die computes BF16 and FP8 GEMMs as a
#: Blackwell one at the same peak (ml-engineering's B300 MAMF, 78.6% of its peak, "same as
#: B200"), so it takes GB200's measured GEMMs. Its attention is Blackwell Ultra's; its
#: sustained fraction its own (:data:`GB300_SUSTAINED`).
GB300 = replace(
    GB200, name="gb300", memory_gb=288.0, compute_capability=(10, 3),
    peak_tflops=_with_fp4(GB200.peak_tflops, 15000.0),
    attention_forward=BLACKWELL_ULTRA_ATTENTION_FORWARD,
    attention_backward=BLACKWELL_ULTRA_ATTENTION_BACKWARD, sustained=GB300_SUSTAINED,
    fp8_attention="gb300",
    source="Blackwell Ultra of a GB300 NVL72 rack; GB200's peaks but FP4, SMs and GEMMs, "
           "288 GB at 8 TB/s; attention: Blackwell's fit times cuDNN's GB300 / GB200 "
           "same-day speed-up; sustained fraction from the Megatron-Bridge 26.04 GB300 / "
           "GB200 pair")

#: B300's own sustained fraction, set the way GB300's is (:data:`GB300_SUSTAINED`), from the
#: one pair of runs NVIDIA published of one model on B300 and B200 in one layout, settings
#: and release that flowsim prices well: Megatron-Bridge 26.04, DeepSeek-V3 in MXFP8 on 256
#: GPUs (PP 16, EP 8 in each node on HybridEP, micro-batch 1 on both; B300 3,131 tokens/s
#: per GPU, B200 2,815: 1.11 times as fast). 0.66 is the X at which
#: ``validate_published.py --only mbridge2604_b300_deepseek --sustained X`` gives the B300
#: row the error ``--only mbridge2604_b200_deepseek`` gives the B200 row at B200's constant
#: (both -8.6%; 0.65 gives -7.3%); it was 0.60 while B200 took GB200's 0.59. B300 borrowed
#: GB300's 0.71 until B300 rows were published, and all four came out fast (-7% to -41%);
#: like B200 it is an air-cooled HGX part, where GB300 runs in a rack at a larger power
#: budget than GB200.
B300_SUSTAINED = 0.66

#: B300 SXM (HGX / DGX B300): B200's peaks (2,250 TFLOP/s BF16, 4,500 FP8; FP4 12,600 against
#: B200's 9,000) and 148 SMs with
#: 288 GB of HBM3e at 8 TB/s, and its own MAMF (ml-engineering's tables: BF16 1,769.0 at
#: 12288x18432x1024, FP8 3,353.3, torch 2.9.1+cu130); attention Blackwell Ultra's; its own
#: sustained fraction (:data:`B300_SUSTAINED`).
B300_SXM = replace(
    B200_SXM, name="b300_sxm", memory_gb=288.0, mamf_tflops=1769.0,
    compute_capability=(10, 3), peak_tflops=_with_fp4(B200_SXM.peak_tflops, 12600.0),
    mamf_shape=(12288, 18432, 1024),
    fp8_gemm_ratio=round(3353.3 / 4500.0 / (1769.0 / 2250.0), 3),
    attention_forward=BLACKWELL_ULTRA_ATTENTION_FORWARD,
    attention_backward=BLACKWELL_ULTRA_ATTENTION_BACKWARD, sustained=B300_SUSTAINED,
    fp8_attention="gb300",
    source="B300 SXM; ml-engineering accelerator tables (peaks, memory, MAMF with torch "
           "2.9.1+cu130); attention: Blackwell's fit times cuDNN's GB300 / GB200 same-day "
           "speed-up; sustained fraction from the Megatron-Bridge 26.04 B300 / B200 pair")

#: presets by name (also reachable by the short names ``a100``, ``h100``, ``h200``, ``h800``,
#: ``b200``, ``b300``)
DEVICES: Mapping[str, Device] = MappingProxyType({
    d.name: d for d in (A100_SXM_80GB, A100_SXM_40GB, H100_SXM_80GB, H200_SXM_141GB,
                        H800_SXM_80GB, GB200, B200_SXM, GB300, B300_SXM)})


def device(name: object, *, source: str = "argument", key: str = "device") -> Device:
    """A preset by name (case-insensitive; ``a100``, ``h100`` and ``h800`` are the SXM 80 GB
    parts, ``h200`` the SXM 141 GB part, ``b200`` and ``b300`` the SXM parts; a vendor's name
    of a preset's part, such as nvidia-smi's ``NVIDIA A100-SXM4-40GB``, is that preset: see
    :mod:`flowsim.device_names`)."""
    if isinstance(name, Device):
        return name
    if isinstance(name, str):
        wanted = preset_name(name)
        if wanted in DEVICES:
            return DEVICES[wanted]
    raise config_error(source, key, "one of " + ", ".join([*DEVICES, *ALIASES]), name)
