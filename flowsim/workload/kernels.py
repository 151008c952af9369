"""What a compute op does, as kernel descriptions a compute model can price.

A compute op of a workload may carry ``kernels``: the GPU kernels it stands for, each
described by its shape rather than its time, so that the same workload can be priced on any
device (:mod:`flowsim.compute`). The descriptions are plain, hashable data:

:class:`Gemm`
    ``batch`` independent matrix products ``(m x k) @ (k x n)``.
:class:`Attention`
    Fused (flash) attention of ``batch`` sequences, ``heads`` query heads and ``kv_heads``
    key/value heads, forward or backward, with or without the causal mask.
:class:`Elementwise`
    A memory-bound kernel: ``bytes`` read and written (norms, activations, dropout, residual
    adds, softmax, optimizer updates).
:class:`Quantize`
    Transformer Engine's cast of one 16-bit GEMM operand to FP8 under one scaling recipe
    (its bytes depend on the device: :mod:`flowsim.compute.quantize`).
:class:`Work`
    Anything else: FLOPs and bytes, priced on a roofline.
:class:`HostCopy`
    ``bytes`` copied between device and host memory over the GPU's host link (activation
    offloading), on a copy stream beside the kernels.

FLOP counts follow the usual conventions: a GEMM is ``2 m n k`` per product; attention forward
is ``4 s_q s_kv d`` per head (two GEMMs), halved under a causal mask (half the score matrix is
masked out and skipped by flash kernels), and its backward ``2.5x`` the forward (five GEMMs
against two: Dao, "FlashAttention-2", 2023, section 4.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._validate import choices_of

DType = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
#: how low-precision training scales its tensors: FP8 (Megatron-LM's ``--fp8-recipe``;
#: Transformer Engine's ``DelayedScaling``, ``Float8CurrentScaling`` and ``MXFP8BlockScaling``
#: recipes) or NVFP4, whose GEMMs are FP4 (``--fp4-recipe nvfp4``; ``NVFP4BlockScaling``)
Fp8Recipe = Literal["delayed", "tensorwise", "mxfp8", "nvfp4"]
FP8_RECIPES: tuple[Fp8Recipe, ...] = choices_of(Fp8Recipe)
#: the recipes that scale blocks, each layout cast from the 16-bit input (only Blackwell's
#: tensor cores apply their scales; ``dtype: mxfp8`` and ``dtype: nvfp4`` name them)
BLOCK_SCALED_RECIPES: tuple[Fp8Recipe, ...] = ("mxfp8", "nvfp4")
#: bytes per element of each data type (FP4's E2M1: two elements a byte)
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1,
                                 "fp4": 0.5}
#: bytes of one NVFP4 scale (E4M3) per block of this many elements (besides one FP32 scale
#: per tensor, which no traffic counts)
NVFP4_BLOCK = 16
#: bytes of one NVFP4 element with its block's share of the E4M3 scale
NVFP4_BYTES = DTYPE_BYTES["fp4"] + 1 / NVFP4_BLOCK
#: GEMM data types whose result Transformer Engine writes in 16 bits
LOW_PRECISION_GEMMS = ("fp8", "fp4")


@dataclass(frozen=True)
class Gemm:
    """``batch`` matrix products of ``(m x k)`` by ``(k x n)`` in ``dtype``; ``sm_margin``
    SMs are held by a communication kernel running beside it (its tiles run on the rest)."""

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bf16"
    sm_margin: int = 0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def bytes(self) -> float:
        """Operands read and the result written once (the least traffic possible): the
        operands in the GEMM's data type (FP4's with its block scales), an FP8 or FP4 GEMM's
        result in 16 bits (Transformer Engine writes BF16)."""
        operand = NVFP4_BYTES if self.dtype == "fp4" else DTYPE_BYTES[self.dtype]
        result = 2.0 if self.dtype in LOW_PRECISION_GEMMS else DTYPE_BYTES[self.dtype]
        return self.batch * (operand * (self.m * self.k + self.k * self.n)
                             + result * self.m * self.n)


@dataclass(frozen=True)
class Attention:
    """Fused (flash) attention: ``batch`` sequences of ``seq_q`` queries against ``seq_kv``
    keys, ``heads`` query heads of ``head_dim``, ``kv_heads`` key/value heads (grouped-query
    attention when fewer than ``heads``). ``implementation``: ``flash``, the device's best
    fused kernel, or ``flash2``, FlashAttention-2 (slower on devices that have a newer one).
    ``window``: sliding-window attention (Beltagy et al. 2020; Mistral 7B, Gemma, GPT-OSS),
    each query attending its ``window`` latest keys only."""

    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    kv_heads: int = 0
    causal: bool = True
    backward: bool = False
    dtype: str = "bf16"
    implementation: str = "flash"
    #: a causal sliding window: the keys each query attends back to (0: all of them)
    window: int = 0
    #: FP8 attention's scaling recipe (``dtype`` fp8: Transformer Engine's
    #: ``fp8_dot_product_attention``; :mod:`flowsim.compute.attention_fp8`)
    recipe: str = ""

    @property
    def windowed(self) -> bool:
        return self.causal and 0 < self.window < self.seq_kv

    @property
    def window_keys(self) -> float:
        """Keys an average query attends within the window (``seq_q = seq_kv``): ``w`` less
        the ramp of the first ``w`` queries, ``w^2 / 2s``."""
        return self.window - self.window * self.window / (2 * self.seq_q)

    @property
    def flops(self) -> float:
        forward = 4.0 * self.batch * self.heads * self.seq_q * self.seq_kv * self.head_dim
        if self.causal:
            forward /= 2
        if self.windowed:
            forward = 4.0 * self.batch * self.heads * self.seq_q * self.window_keys * \
                self.head_dim
        return forward * (2.5 if self.backward else 1.0)

    @property
    def bytes(self) -> float:
        """Q, K, V and the output read or written once (the backward also reads the output
        gradient and writes three input gradients)."""
        kv = self.kv_heads or self.heads
        q = self.batch * self.heads * self.seq_q * self.head_dim
        k = self.batch * kv * self.seq_kv * self.head_dim
        tensors = 2 * q + 2 * k if not self.backward else 4 * q + 4 * k
        return float(DTYPE_BYTES[self.dtype]) * tensors


@dataclass(frozen=True)
class Elementwise:
    """A memory-bound kernel moving ``bytes`` to and from device memory (and doing ``flops``
    on the way, which never bound it)."""

    bytes: float
    flops: float = 0.0
    name: str = ""


@dataclass(frozen=True)
class Quantize:
    """One 16-bit GEMM operand of ``elements`` cast to FP8 (NVFP4 under ``nvfp4``) under
    ``recipe``, in both the layouts its GEMMs read (the forward's or data gradient's, and the
    weight gradient's), or in the first alone (``layouts`` 1: a frozen layer's, which has no
    weight gradient: Transformer Engine asks its quantizers for the column-wise copy only
    when the weight requires a gradient).

    ``bytes`` is the traffic where the second layout is a written transpose (Hopper); a
    compute model prices its device's own (:func:`quantize_bytes`)."""

    elements: int
    recipe: Fp8Recipe = "delayed"
    layouts: int = 2

    @property
    def flops(self) -> float:
        """None that bound it (a scale and a rounding per element)."""
        return 0.0

    @property
    def bytes(self) -> float:
        return quantize_bytes(self, any_layout=False)


#: bytes of one MXFP8 scale (E8M0) per block of this many elements
MXFP8_BLOCK = 32


def quantize_bytes(quantize: Quantize, *, any_layout: bool) -> float:
    """Device-memory traffic of ``quantize`` (Transformer Engine 2.x).

    Every recipe reads the 16-bit operand once to cast it. Tensor scaling (``delayed``,
    ``tensorwise``) writes one FP8 copy, plus its transpose where the device's FP8 GEMMs take
    ``TN`` operands only (Hopper); where they take any layout (``any_layout``: Blackwell,
    Transformer Engine's ``nvte_is_non_tn_fp8_gemm_supported``) the weight gradient reads the
    same copy and no transpose is made. Current scaling (``tensorwise``) moves the same bytes:
    the kernel that produces an operand (norm, activation, attention, GEMM epilogue) finds
    its absolute maximum on the way (``quantize_with_amax``); the few separate amax passes
    are left out. ``mxfp8`` scales each block of :data:`MXFP8_BLOCK` elements along the
    reduction dimension, which differs between the two layouts, so it always writes both
    copies, each with one E8M0 byte per block, in the one pass that finds the scales.
    ``nvfp4`` (Transformer Engine's ``NVFP4BlockScaling``) likewise writes both layouts, each
    computed from the 16-bit input, half a byte per element and one E4M3 byte per block of
    :data:`NVFP4_BLOCK`, with the random Hadamard transform of the weight gradient's operands
    fused into that pass; its second-level (per-tensor) scale needs the tensor's absolute
    maximum before any block is cast, which its quantizer finds in a pass of its own that
    reads the operand once more (``NVFP4Quantizer::quantize_impl``: ``compute_amax``, after
    the Hadamard transform where one applies).
    """
    n, copies = quantize.elements, quantize.layouts
    if quantize.recipe == "mxfp8":
        return 2.0 * n + copies * (n + n / MXFP8_BLOCK)
    if quantize.recipe == "nvfp4":
        return 4.0 * n + copies * NVFP4_BYTES * n
    return 2.0 * n + (n if any_layout or copies == 1 else 2.0 * n)


@dataclass(frozen=True)
class Work:
    """Work known only by its FLOPs and bytes (a Chakra or symbolic-tensor-graph node)."""

    flops: float
    bytes: float = 0.0


@dataclass(frozen=True)
class HostCopy:
    """``bytes`` copied between device and host memory (either way) over the GPU's link to its
    host, as activation offloading's copy stream does: priced at the device's host-link rate
    (:attr:`flowsim.compute.Device.host_gbps`), never a kernel of the compute stream."""

    bytes: float
    flops: float = 0.0


Kernel = Gemm | Attention | Elementwise | Quantize | Work | HostCopy
