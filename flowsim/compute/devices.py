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

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from ..device_names import ALIASES, preset_name
from ..errors import config_error
from .device_spec import PCIE_GEN4_X16, SUSTAINED, Device
from .devices_blackwell import (
    B200_SUSTAINED,
    B200_SXM,
    B300_SUSTAINED,
    B300_SXM,
    GB200,
    GB200_SUSTAINED,
    GB300,
    GB300_SUSTAINED,
)

__all__ = ["B200_SUSTAINED", "B200_SXM", "B300_SUSTAINED", "B300_SXM", "DEVICES", "Device",
           "GB200", "GB200_SUSTAINED", "GB300", "GB300_SUSTAINED", "H100_SUSTAINED",
           "SUSTAINED", "device"]

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
