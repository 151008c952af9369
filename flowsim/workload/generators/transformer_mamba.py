"""The kernels of a Mamba-2 mixer on one rank for one micro-batch: Dao and Gu, "Transformers
are SSMs" (ICML 2024, arXiv 2405.21060), as Megatron-Core's ``MambaMixer`` runs it
(``megatron/core/ssm/mamba_mixer.py``) with the ``mamba_ssm`` package's Triton kernels.

With ``H`` heads of ``P`` channels (inner width ``D = H P``), a state of ``N``, ``G`` groups
sharing B and C, all split over the ``t`` tensor-parallel ranks:

* ``in_proj``, column-parallel (the layer's norm fused in front, as Transformer Engine's
  ``LayerNormColumnParallelLinear`` does), hidden to ``z, x, B, C, dt``: ``2 D + 2 G N + H``;
* a causal depthwise convolution (width ``conv``) with SiLU over ``x, B, C``;
* the state-space dual (SSD) scan in chunks of ``Q`` tokens (``mamba_chunk_scan_combined``):
  per chunk and head the chunk's state ``B^T X`` (``N x Q`` by ``Q x P``), the states
  passed from chunk to chunk (sequential, memory-bound, FP32), per chunk and group the
  ``C B^T`` matrix (``Q x N`` by ``N x Q``), then per chunk and head the output, the
  masked ``(C B^T) X`` (causal: half of ``Q x Q`` by ``Q x P``) plus ``C`` times the state
  passed in (``Q x N`` by ``N x P``). These small matmuls run as 16-bit GEMMs in FP8
  training too (the kernels are not Transformer Engine's);
* the gate ``y silu(z)`` (in the scan's epilogue: ``mamba_split_conv1d_scan_combined``,
  which also keeps the ungated output) and the grouped RMS norm;
* ``out_proj``, row-parallel, ``D`` to hidden.

The backward (``MambaSplitConv1dScanCombinedFn``) recomputes the convolution, the decay,
``C B^T``, the chunk states and their passing, then runs the gate's backward, per head the
states' gradients (``P x Q`` by ``Q x N``), the inputs' (from the states' gradients and from
the masked ``C B^T``), ``B``'s and ``C``'s (``Q x P`` by ``P x N`` each), ``C B^T``'s and
the decay's (``Q x P`` by ``P x Q`` each), per group ``B``'s and ``C``'s from ``C B^T``'s
gradient (``Q x Q`` by ``Q x N`` each), the states' gradients passed back, and the
convolution's backward (``mamba_ssm`` at e9594ce1, ``ssd_combined.py``).

Megatron-Core refuses context parallelism with Mamba unless its heads are exchanged by
all-to-alls; flowsim does not model that (:mod:`.transformer_hybrid` refuses it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from ..kernels import Kernel
from .transformer_hybrid import MambaMixer
from .transformer_shapes import ACT, LayerShapes, elementwise

#: bytes of an SSD state element and of the chunks' cumulative decay (FP32)
STATE = 4
#: the states passed from chunk to chunk are written back in 16 bits, and read again so
#: (``_state_passing_fwd``'s ``out_dtype``; the backward's recomputation keeps FP32)
PASSED = 2
#: the mixer's Transformer Engine modules, by their paths in Megatron-Core's layer
IN_PROJ, OUT_PROJ = "mixer.in_proj", "mixer.out_proj"


@dataclass(frozen=True)
class MambaKernels(LayerShapes):
    """The mixer's kernel tuples (see the module docstring): ``in_proj``, the body between
    the tensor-parallel collectives (``core``), ``out_proj``, and their backward."""

    @property
    def m(self) -> MambaMixer:
        assert self.spec.mamba is not None
        return self.spec.mamba

    # ------------------------------------------------------------------ the rank's widths
    @property
    def heads(self) -> int:
        return self.m.nheads(self.spec.hidden) // self.spec.tp

    @property
    def inner(self) -> int:
        """``D / t``: the rank's inner width."""
        return self.heads * self.m.head_dim

    @property
    def groups(self) -> int:
        return self.m.groups // self.spec.tp

    @property
    def conv_channels(self) -> int:
        """``x``, ``B`` and ``C``: what the convolution runs over."""
        return self.inner + 2 * self.groups * self.m.state

    @property
    def in_width(self) -> int:
        """``in_proj``'s output on the rank: ``z``, ``x``, ``B``, ``C`` and ``dt``."""
        return self.inner + self.conv_channels + self.heads

    @property
    def chunk_lengths(self) -> tuple[tuple[int, int], ...]:
        """(chunks, tokens in each) of the micro-batch's sequences: the whole chunks, and
        the last one's remainder (the kernels stop at the sequence's end)."""
        whole, rest = divmod(self.spec.sequence, self.m.chunk)
        b = self.spec.micro_batch
        return tuple((b * count, length) for count, length in ((whole, self.m.chunk),
                                                               (1, rest)) if count and length)

    @property
    def chunks(self) -> int:
        return sum(count for count, _ in self.chunk_lengths)

    @property
    def states_bytes(self) -> int:
        """Every chunk's state, FP32."""
        return self.chunks * self.heads * self.m.head_dim * self.m.state * STATE

    def _products(self, shape: Callable[[int], tuple[int, int, int]], per_head: bool = True
                  ) -> tuple[Kernel, ...]:
        """One batched 16-bit GEMM per chunk length ``q``, of ``shape(q)`` (m, n, k), one
        product per chunk and head (or group)."""
        each = self.heads if per_head else self.groups
        return tuple(self._gemm16(*shape(q), count * each) for count, q in self.chunk_lengths)

    # ------------------------------------------------------------------ the scan's pieces
    @cached_property
    def _chunk_state(self) -> tuple[Kernel, ...]:
        """The chunk's state: ``P x Q`` by ``Q x N`` per head."""
        p, n = self.m.head_dim, self.m.state
        return self._products(lambda q: (p, n, q))

    @cached_property
    def _state_passing(self) -> tuple[Kernel, ...]:
        """The FP32 states read and the passed ones written, chunk after chunk."""
        return (elementwise(self.states_bytes * (STATE + PASSED) // STATE, "ssd_state_passing"),)

    @cached_property
    def _bmm_chunk(self) -> tuple[Kernel, ...]:
        """``C B^T``: ``Q x N`` by ``N x Q`` per group."""
        n = self.m.state
        return self._products(lambda q: (q, q, n), per_head=False)

    @cached_property
    def _chunk_scan(self) -> tuple[Kernel, ...]:
        """The output: the masked ``(C B^T) X`` (half of the square: the causal mask) and
        ``C`` times the state passed in; the gate in its epilogue (``z`` read, the ungated
        output written beside the gated one)."""
        p, n = self.m.head_dim, self.m.state
        return (*self._products(lambda q: (q, p, max(1, q // 2))),
                *self._products(lambda q: (q, p, n)),
                elementwise(2 * self.n * self.inner * ACT, "ssd_gate"))

    @cached_property
    def _cumsum(self) -> tuple[Kernel, ...]:
        """``dt`` through softplus and the decay's cumulative sum per chunk (FP32)."""
        return (elementwise(self.n * self.heads * (ACT + 2 * STATE), "ssd_cumsum"),)

    @cached_property
    def _conv(self) -> tuple[Kernel, ...]:
        """The causal convolution with SiLU: ``x, B, C`` read and written."""
        return (elementwise(2 * self.n * self.conv_channels * ACT, "causal_conv1d"),)

    @cached_property
    def _grouped_norm(self) -> tuple[Kernel, ...]:
        """The gated output read, the normed one written."""
        return (elementwise(2 * self.n * self.inner * ACT, "grouped_rmsnorm"),)

    @cached_property
    def _layouts(self) -> tuple[Kernel, ...]:
        """Megatron-Core's copies between the projections' sequence-first layout and the
        kernels' batch-first one (``in_proj``'s output, the scan's output; their gradients
        backward): views when a micro-batch is one sequence."""
        if self.spec.micro_batch == 1:
            return ()
        return (elementwise(2 * self.n * self.in_width * ACT, "contiguous_zxbcdt"),
                elementwise(2 * self.n * self.inner * ACT, "contiguous_y"))

    # ------------------------------------------------------------------ forward
    @cached_property
    def in_proj(self) -> tuple[Kernel, ...]:
        return self._linear(self.in_width, self.spec.hidden, module=IN_PROJ)

    @cached_property
    def core(self) -> tuple[Kernel, ...]:
        """Convolution, scan and gated norm: what runs between the two linear layers."""
        return (*self._layouts[:1], *self._conv, *self._cumsum, *self._chunk_state,
                *self._state_passing, *self._bmm_chunk, *self._chunk_scan, *self._layouts[1:],
                *self._grouped_norm)

    @cached_property
    def out_proj(self) -> tuple[Kernel, ...]:
        return self._linear(self.spec.hidden, self.inner, module=OUT_PROJ)

    # ------------------------------------------------------------------ backward
    @cached_property
    def out_proj_dgrad(self) -> tuple[Kernel, ...]:
        return self._linear(self.inner, self.spec.hidden, module=OUT_PROJ)

    @cached_property
    def core_backward(self) -> tuple[Kernel, ...]:
        """The norm's backward, the recomputed forward (all but the output), the scan's
        backward products (see the module docstring) and its elementwise steps, the
        convolution's backward."""
        p, n = self.m.head_dim, self.m.state
        products = (*self._products(lambda q: (p, n, q)),                 # the states'
                    *self._products(lambda q: (q, p, n)),                 # x's, from them
                    *self._products(lambda q: (q, p, max(1, q // 2))),    # x's, from C B^T
                    *self._products(lambda q: (q, n, p)),                 # B's
                    *self._products(lambda q: (q, n, p)),                 # C's
                    *self._products(lambda q: (q, q, p)),                 # C B^T's
                    *self._products(lambda q: (q, q, p)),                 # the decay's
                    *self._products(lambda q: (q, n, q), per_head=False),   # B's, C B^T's
                    *self._products(lambda q: (q, n, q), per_head=False))   # C's, C B^T's
        first = len(self.chunk_lengths)   # the states' gradients, passed back before the rest
        passing_back = elementwise(self.states_bytes * 3, "ssd_state_passing_backward")
        return (*self._layouts[1:],
                elementwise(3 * self.n * self.inner * ACT, "rmsnorm_backward"),
                *self._conv, *self._cumsum, *self._bmm_chunk, *self._chunk_state,
                elementwise(2 * self.states_bytes, "ssd_state_passing"),
                elementwise(6 * self.n * self.inner * ACT, "ssd_gate_backward"),
                *products[:first], passing_back, *products[first:], *self._cumsum,
                elementwise(3 * self.n * self.conv_channels * ACT, "causal_conv1d_backward"),
                *self._layouts[:1])

    @cached_property
    def in_proj_dgrad(self) -> tuple[Kernel, ...]:
        return self._linear(self.spec.hidden, self.in_width, module=IN_PROJ)

    @cached_property
    def wgrad(self) -> tuple[Kernel, ...]:
        """``out_proj``'s weight gradient, then ``in_proj``'s (and the convolution's, the
        decay's and the norm's, small beside them)."""
        h = self.spec.hidden
        return (self._gemm(self.inner, h, self.n, module=OUT_PROJ),
                self._gemm(h, self.in_width, self.n, module=IN_PROJ))

    # ------------------------------------------------------------------ parameters
    @property
    def parameters(self) -> int:
        """The rank's share of the mixer's weights: the two projections, the convolution
        (weights and bias), ``dt``'s bias, ``A`` and ``D`` per head, the norm."""
        h = self.spec.hidden
        return (h * self.in_width + self.inner * h + self.conv_channels * (self.m.conv + 1)
                + 3 * self.heads + self.inner)

    @property
    def activations(self) -> int:
        """Bytes the mixer keeps for its backward (16-bit) beyond its norm's input and
        output (counted with every layer's): ``in_proj``'s output, the scan's ungated
        output, the norm's input and ``out_proj``'s (the convolution's output is
        recomputed: ``mamba_split_conv1d_scan_combined``)."""
        return ACT * self.n * (self.in_width + 3 * self.inner)
