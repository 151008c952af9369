"""Time of a GEMM on a GPU from its shape: tiles, waves and a mainloop of known efficiency.

cuBLAS computes ``C = A @ B`` (``m x k`` by ``k x n``) in output tiles of ``tm x tn``, one
thread block per tile and one block per SM at a time (NVIDIA, "Matrix Multiplication
Background User's Guide", DU-09799-001, sections 2.3, 3.1 and 3.2). So:

* **tile quantization**: a partial tile at the edge costs a whole tile;
* **wave quantization**: tiles run in waves of one per SM; the last wave may be short;
* every tile streams the ``k`` dimension through a pipelined mainloop whose prologue and
  epilogue cost about :data:`K_OVERHEAD` iterations of ``k`` (filling and draining a
  multi-stage pipeline, writing the tile out), at a rate of ``peak / SMs`` times the device's
  asymptotic mainloop efficiency;
* when the tiles cannot fill the SMs, the ``k`` loop is split over several blocks (split-K),
  whose partial results are added up afterwards;
* small or thin products are bound by memory traffic instead (every operand read, the result
  written), and every kernel pays a fixed launch cost.

The asymptotic efficiency is not fitted to training runs: it is derived from the device's
measured best GEMM (:attr:`~.devices.Device.mamf_tflops` at its shape) by inverting this very
model (:func:`asymptotic_efficiency`). The tile shapes and their relative mainloop efficiency
are cuBLAS's usual ones (larger tiles reuse operands more).
"""

from __future__ import annotations

import math
from functools import cache

from ..errors import config_error
from ..workload.kernels import LOW_PRECISION_GEMMS, Gemm
from .devices import Device

#: (tile m, tile n, mainloop efficiency relative to the largest tiles)
TILES: tuple[tuple[int, int, float], ...] = (
    (256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 128, 0.85),
    (64, 64, 0.7))
#: prologue and epilogue of a tile, in iterations of its k loop (elements of k)
K_OVERHEAD = 128
#: smallest slice of k one block of a split-K GEMM works on
MIN_SPLIT_K = 256


def _tile_ns(device: Device, tm: int, tn: int, k: int, rate: float, relative: float) -> float:
    """One tile: ``2 tm tn (k + overhead)`` FLOPs at an SM's share of the mainloop rate."""
    return 2.0 * tm * tn * (k + K_OVERHEAD) / (rate / device.sms * relative)


def _compute_ns(device: Device, m: int, n: int, k: int, batch: int, rate: float,
                sms: int = 0) -> float:
    """The best tile shape and split-K for the product on ``sms`` SMs (0: all of them), its
    compute-bound time (ns)."""
    sms = sms or device.sms
    best = math.inf
    for tm, tn, relative in TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        split = 1
        if tiles < sms:   # fill the SMs by splitting k
            split = max(1, min(sms // tiles, k // MIN_SPLIT_K))
        waves = math.ceil(tiles * split / sms)
        t = waves * _tile_ns(device, tm, tn, math.ceil(k / split), rate, relative)
        best = min(best, t)
    return best


def asymptotic_efficiency(device: Device) -> float:
    """The mainloop efficiency (fraction of peak) that makes this model reproduce the device's
    measured best GEMM (its MAMF at its shape)."""
    return _asymptotic(device)


@cache
def _asymptotic(device: Device) -> float:
    m, n, k = device.mamf_shape
    at_peak = _compute_ns(device, m, n, k, 1, device.peak("bf16"))
    measured = 2.0 * m * n * k / (device.mamf_tflops * 1e3) - device.launch_us * 1e3
    return at_peak / measured


def gemm_ns(device: Device, gemm: Gemm) -> float:
    """Time of ``gemm`` on ``device`` (ns): compute- or memory-bound, plus a kernel launch.

    A GEMM beside a communication kernel that holds ``sm_margin`` SMs runs its tiles on the
    others (at least one), each at the same per-SM rate."""
    if gemm.dtype == "fp4" and "fp4" not in dict(device.peak_tflops):
        raise config_error(f"device {device.name!r}", "dtype",
                           "a data type its tensor cores have (FP4 needs Blackwell)", "fp4")
    rate = device.peak(gemm.dtype) * _asymptotic(device)
    # FP8's GEMMs reach fp8_gemm_ratio of the BF16 GEMM's fraction of their peak (measured),
    # FP4's the same (an assumption: no FP4 GEMM measurement is published; NVIDIA's cuBLAS
    # 12.9 notes put block-scaled FP4 matmuls on Blackwell at up to 2.3 times FP8's, above the
    # 2x of their peaks; nothing published says so of Blackwell Ultra, whose FP4 peak is 3x its
    # FP8 one, and the one GB300 NVFP4 row at 405B's sizes comes out fast)
    if gemm.dtype in LOW_PRECISION_GEMMS:
        rate *= device.fp8_gemm_ratio
    sms = max(1, device.sms - gemm.sm_margin) if gemm.sm_margin else 0
    compute = _compute_ns(device, gemm.m, gemm.n, gemm.k, gemm.batch, rate, sms)
    memory = gemm.bytes / (device.memory_gbps * device.memory_efficiency)
    return max(compute, memory) + device.launch_us * 1e3
