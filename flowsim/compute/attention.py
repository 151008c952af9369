"""Time of a fused (flash) attention kernel from its shape.

A flash-attention kernel gives each thread block one tile of :data:`BLOCK_Q` queries of one
head and streams the keys and values through it (Dao, "FlashAttention-2", 2023, section 3):
the blocks run in waves over the SMs like GEMM tiles, at a rate the device's published kernel
benchmarks set (:attr:`~.devices.Device.attention_forward` / ``_backward``). Short sequences
reach less of it: every block pays a fixed prologue and epilogue (loading its queries, the
final rescaling and write-out), about :data:`KV_OVERHEAD` keys' worth of work.
"""

from __future__ import annotations

import math

from ..workload.kernels import Attention
from .devices import Device

#: queries per thread block
BLOCK_Q = 128
#: fixed work of a block, in keys of its loop
KV_OVERHEAD = 256


def attention_ns(device: Device, attention: Attention) -> float:
    """Time of ``attention`` on ``device`` (ns), plus a kernel launch."""
    if attention.implementation == "flash2" and device.flash2_forward:
        efficiency = device.flash2_backward if attention.backward else device.flash2_forward
    else:
        efficiency = device.attention_backward if attention.backward else \
            device.attention_forward
    rate = device.peak(attention.dtype) * efficiency
    blocks = attention.batch * attention.heads * math.ceil(attention.seq_q / BLOCK_Q)
    waves = math.ceil(blocks / device.sms)
    fill = blocks / (waves * device.sms)
    # keys a block visits: all of them, or under the causal mask half on average
    keys = attention.seq_kv / 2 if attention.causal else attention.seq_kv
    stretch = (keys + KV_OVERHEAD) / keys if keys > 0 else 1.0
    return attention.flops / (rate * fill) * stretch + device.launch_us * 1e3
