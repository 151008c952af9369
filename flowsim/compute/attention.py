"""Time of a fused (flash) attention kernel from its shape.

A flash-attention kernel gives each thread block one tile of :data:`BLOCK_Q` queries of one
head and streams the keys and values through it (Dao, "FlashAttention-2", 2023, section 3):
the blocks run in waves over the SMs like GEMM tiles, at a rate the device's published kernel
benchmarks set (:attr:`~.devices.Device.attention_forward` / ``_backward``, measured without
the causal mask). Short sequences reach less of it: every block pays a fixed prologue and
epilogue (loading its queries, the final rescaling and write-out), about :data:`KV_OVERHEAD`
keys' worth of work. Under the causal mask a block visits half the keys on average, so that
fixed work weighs twice as much, and the kernel runs at :data:`CAUSAL_EFFICIENCY` of its
unmasked rate besides (blocks of unequal length, masked tiles on the diagonal).

Both constants come from one source, the forward speed figures of Shah et al.,
"FlashAttention-3" (arXiv 2407.08608, 2024), H100 SXM5, BF16, head dimension 128, 16K tokens
per batch, sequence lengths 512 to 16K: fitted together (least squares on the log) to the
causal curves of cuDNN (315 ... 539 TFLOP/s) and FlashAttention-2 (191 ... 335), this model
priced from the device presets' unmasked rates at 16K (595 and 370), they give 0.975 and 198
keys. The model then follows both curves within 3.4% at every length; with the mask counted
only through the fixed work (and 256 keys of it) it ran from 8.5% slow at 512 tokens to 3.9%
fast at 16K. The paper has no causal backward figure: the backward is taken to lose the
same fraction.

The device presets' rates are measured at head dimension 128. Other head dimensions run at
another rate (:data:`HEAD_DIM_RATE`: smaller ones do less matmul work per score against the
same softmax work, larger ones fit smaller blocks on chip), and a kernel is compiled for
some dimensions only, the rest padded up to the next (:func:`padded_head_dim`) and paying
for the padding.
"""

from __future__ import annotations

import math

import numpy as np

from ..workload.kernels import Attention
from .devices import Device

#: queries per thread block
BLOCK_Q = 128
#: fixed work of a block, in keys of its loop (fitted: see the module docstring)
KV_OVERHEAD = 198
#: a causal kernel's rate over its unmasked rate, at long sequences (fitted: module docstring)
CAUSAL_EFFICIENCY = 0.975

#: a kernel's rate at a head dimension over its rate at 128 (linear in between, held beyond
#: the ends), at 16K tokens, from published speed figures. ``flash2``, FlashAttention-2: at
#: 64 the mean of the forward-plus-backward ratios of Dao, "FlashAttention-2" (arXiv
#: 2307.08691), Figure 4 on A100 (176 / 203 without the mask, 171 / 189 with it) and of
#: the same benchmark on H100 in the flash-attention repository
#: (``assets/flash2_h100_fwd_bwd_benchmark.png``: 296 / 338, 284 / 328); at 256 the mean of
#: the forward ratios of Shah et al., "FlashAttention-3" (arXiv 2407.08608) on H100
#: (326 / 370, 298 / 335; the repository's ``assets/flash3_fp16_fwd.png``). ``cudnn``,
#: cuDNN's fused attention: the same figure's forward ratios (64: 413 / 595, 388 / 539;
#: 256: 581 / 595, 509 / 539), its backward taken to lose the same fraction. The ratio
#: barely moves with the sequence length in these figures (FlashAttention-2 at 64 over 128:
#: 0.86-0.91 from 512 to 16K tokens).
HEAD_DIM_RATE = {
    "flash2": ((64, 0.878), (128, 1.0), (256, 0.885)),
    "cudnn": ((64, 0.707), (128, 1.0), (256, 0.960)),
}


def padded_head_dim(kernel: str, head_dim: int) -> int:
    """The head dimension ``kernel`` runs ``head_dim`` at: FlashAttention-2 rounds it up to a
    multiple of 32 up to 128 and of 64 beyond, the dimensions it is compiled for
    (``flash_api.cpp``, ``round_multiple(head_size, head_size <= 128 ? 32 : 64)``); cuDNN
    takes any multiple of 8."""
    step = 8 if kernel == "cudnn" else (32 if head_dim <= 128 else 64)
    return -(-head_dim // step) * step


def head_dim_efficiency(kernel: str, head_dim: int) -> float:
    """The rate at ``head_dim`` over the rate at 128, counting only the FLOPs of the real
    dimension (a padded kernel computes the padding too)."""
    padded = padded_head_dim(kernel, head_dim)
    dims, rates = zip(*HEAD_DIM_RATE[kernel])
    return float(np.interp(padded, dims, rates)) * head_dim / padded


def attention_ns(device: Device, attention: Attention) -> float:
    """Time of ``attention`` on ``device`` (ns), plus a kernel launch."""
    if attention.implementation == "flash2" and device.flash2_forward:
        efficiency = device.flash2_backward if attention.backward else device.flash2_forward
        kernel = "flash2"
    else:
        efficiency = device.attention_backward if attention.backward else \
            device.attention_forward
        kernel = device.attention_kernel
    efficiency *= head_dim_efficiency(kernel, attention.head_dim)
    if attention.causal:
        efficiency *= CAUSAL_EFFICIENCY
    rate = device.peak(attention.dtype) * efficiency
    blocks = attention.batch * attention.heads * math.ceil(attention.seq_q / BLOCK_Q)
    waves = math.ceil(blocks / device.sms)
    fill = blocks / (waves * device.sms)
    # keys a block visits: all of them, or under the causal mask half on average
    keys = attention.seq_kv / 2 if attention.causal else attention.seq_kv
    if attention.windowed:   # a sliding window: the keys within it
        keys = attention.window_keys
    stretch = (keys + KV_OVERHEAD) / keys if keys > 0 else 1.0
    return attention.flops / (rate * fill) * stretch + device.launch_us * 1e3
