"""Time of a fused (flash) attention kernel from its shape.

A flash-attention kernel gives each thread block one tile of :data:`BLOCK_Q` queries of one
head and streams the keys and values through it (Dao, "FlashAttention-2", 2023, section 3):
the blocks run in waves over the SMs like GEMM tiles, at a rate the device's published kernel
benchmarks set (:attr:`~.devices.Device.attention_forward` / ``_backward``, the rate without
the causal mask). Short sequences reach less of it: every block pays a fixed prologue and
epilogue (loading its queries, the final rescaling and write-out), about
:attr:`~.devices.Device.attention_block_keys` keys' worth of work. Under the causal mask a
block visits half the keys on average, so that fixed work weighs twice as much, and the
kernel runs at :data:`CAUSAL_EFFICIENCY` of its unmasked rate besides (blocks of unequal
length, masked tiles on the diagonal).

Both constants come from one source, the forward speed figures of Shah et al.,
"FlashAttention-3" (arXiv 2407.08608, 2024), H100 SXM5, BF16, head dimension 128, 16K tokens
per batch, sequence lengths 512 to 16K: fitted together (least squares on the log) to the
causal curves of cuDNN (315 ... 539 TFLOP/s) and FlashAttention-2 (191 ... 335), this model
priced from the device presets' unmasked rates at 16K (595 and 370), they give 0.975 and 198
keys (the presets' default fixed work). The model then follows both curves within 3.4% at
every length; with the mask counted only through the fixed work (and 256 keys of it) it ran
from 8.5% slow at 512 tokens to 3.9% fast at 16K. The paper has no causal backward figure:
the backward is taken to lose the same fraction.

Blackwell's cuDNN has a published curve of its own, forward and backward, from 512 to 128K
tokens (NVIDIA's cuDNN frontend benchmark on B200, cuDNN 9.10.2): ``scripts/fit_attention.py``
fits this same function to it over 512 to 16K, the rates and the fixed work together
(757 keys where H100's curves give 198: a Blackwell SM streams keys 2.3 times as fast as
a Hopper one, and its fixed work takes 1.6 times as long besides), and the model then
follows it within 1.4% forward and 3.1% backward from 2K to 32K tokens; beyond, the measured
kernel slows (64K: 4% and 10% below the model; 128K: 11% and 15%).

FP8 attention (``dtype`` fp8) runs at this 16-bit rate times the speed-up cuDNN measured for
its shape (:mod:`.attention_fp8`).

The device presets' rates are measured at head dimension 128. Other head dimensions run at
another rate (:mod:`.attention_kernels`: smaller ones do less matmul work per score against
the same softmax work, larger ones fit smaller blocks on chip), and a kernel is compiled for
some dimensions only, the rest padded up to the next and paying for the padding.
"""

from __future__ import annotations

import math

from ..workload.kernels import Attention
from .attention_fp8 import fp8_speedup
from .attention_kernels import head_dim_efficiency
from .devices import Device

#: queries per thread block
BLOCK_Q = 128
#: a causal kernel's rate over its unmasked rate, at long sequences (fitted: module docstring)
CAUSAL_EFFICIENCY = 0.975


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
    if attention.dtype == "fp8":   # the 16-bit kernel's rate times cuDNN's measured speed-up
        rate = device.peak("bf16") * efficiency * fp8_speedup(device, attention)
    else:
        rate = device.peak(attention.dtype) * efficiency
    blocks = attention.batch * attention.heads * math.ceil(attention.seq_q / BLOCK_Q)
    waves = math.ceil(blocks / device.sms)
    fill = blocks / (waves * device.sms)
    # keys a block visits: all of them, or under the causal mask half on average
    keys = attention.seq_kv / 2 if attention.causal else attention.seq_kv
    if attention.windowed:   # a sliding window: the keys within it
        keys = attention.window_keys
    fixed = device.attention_block_keys
    stretch = (keys + fixed) / keys if keys > 0 else 1.0
    return attention.flops / (rate * fill) * stretch + device.launch_us * 1e3
