"""What each fused-attention kernel a device preset can name does with the head dimension:
its rate at a head dimension over its rate at 128 (where the presets' rates are measured),
and the dimensions it is compiled for (the rest run padded up to the next one). One table
per kernel (:data:`HEAD_DIMS`); its keys are the kernels a preset may name
(:data:`ATTENTION_KERNELS`, checked by :class:`~flowsim.compute.devices.Device`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class HeadDims(NamedTuple):
    """A kernel's head-dimension facts."""

    #: (head dimension, rate over the rate at 128), increasing; linear in between, held
    #: beyond the ends
    rates: tuple[tuple[int, float], ...]
    #: (up to this head dimension, compiled for multiples of this), increasing
    steps: tuple[tuple[float, int], ...]


#: Rates at 16K tokens, from published speed figures. ``flash2``, FlashAttention-2: at
#: 64 the mean of the forward-plus-backward ratios of Dao, "FlashAttention-2" (arXiv
#: 2307.08691), Figure 4 on A100 (176 / 203 without the mask, 171 / 189 with it) and of
#: the same benchmark on H100 in the flash-attention repository
#: (``assets/flash2_h100_fwd_bwd_benchmark.png``: 296 / 338, 284 / 328); at 256 the mean of
#: the forward ratios of Shah et al., "FlashAttention-3" (arXiv 2407.08608) on H100
#: (326 / 370, 298 / 335; the repository's ``assets/flash3_fp16_fwd.png``); compiled for
#: multiples of 32 up to 128 and of 64 beyond (``flash_api.cpp``, ``round_multiple(
#: head_size, head_size <= 128 ? 32 : 64)``). ``cudnn``, cuDNN's fused attention: the same
#: figure's forward ratios (64: 413 / 595, 388 / 539; 256: 581 / 595, 509 / 539), its
#: backward taken to lose the same fraction; any multiple of 8. The ratio barely moves with
#: the sequence length in these figures (FlashAttention-2 at 64 over 128: 0.86-0.91 from 512
#: to 16K tokens).
HEAD_DIMS = {
    "flash2": HeadDims(((64, 0.878), (128, 1.0), (256, 0.885)),
                       ((128, 32), (float("inf"), 64))),
    "cudnn": HeadDims(((64, 0.707), (128, 1.0), (256, 0.960)), ((float("inf"), 8),)),
}
#: the fused-attention kernels a preset's rates can measure
ATTENTION_KERNELS = tuple(HEAD_DIMS)


def padded_head_dim(kernel: str, head_dim: int) -> int:
    """The head dimension ``kernel`` runs ``head_dim`` at: the next one it is compiled for."""
    step = next(step for up_to, step in HEAD_DIMS[kernel].steps if head_dim <= up_to)
    return -(-head_dim // step) * step


def head_dim_efficiency(kernel: str, head_dim: int) -> float:
    """The rate at ``head_dim`` over the rate at 128, counting only the FLOPs of the real
    dimension (a padded kernel computes the padding too)."""
    padded = padded_head_dim(kernel, head_dim)
    dims, rates = zip(*HEAD_DIMS[kernel].rates)
    return float(np.interp(padded, dims, rates)) * head_dim / padded
