"""A mixture-of-experts layer's kernels on one rank for one micro-batch (Megatron-Core's
all-to-all token dispatcher): the router, the rank's local experts as grouped GEMMs, their
all-to-all buffers and parameters; the base of :class:`~.transformer_kernels.LayerKernels`.

The dispatcher moves the routed tokens four times around the all-to-alls
(``MoEAlltoAllTokenDispatcher``: ``permute`` copies each token once per expert it is routed
to, ``sort_chunks_by_idxs`` groups the received copies by local expert and back, and
``unpermute`` sums each token's copies, weighted by the router's probabilities); each is a
memory-bound gather or scatter that reads and writes its rows once (the sum writes one row
per token), and its backward moves as many bytes.

With ``moe_latent`` (LatentMoE, Nemotron 3 Super's: Megatron-Core's ``moe_latent_size``,
``megatron/core/transformer/moe/moe_layer.py``) the router still reads the hidden vector,
but a linear layer projects each token down to the latent width before the dispatch, so the
all-to-alls and the experts (latent -> ``moe_ffn`` -> latent) work on latent vectors, and
another projects the combined output back up; both are duplicated over the tensor-parallel
ranks (each runs them on its sequence-parallel shard), their gradients' all-reduce over TP
left out as the latent attention's is (:mod:`.transformer_mla`).

With ``fused_grouped_mlp`` (Transformer Engine's fused grouped MLP,
``transformer_engine/pytorch/ops/fused/grouped_mlp.py``: cuDNN's CuTe DSL grouped GEMMs) the
activation, its scaling by the router's probabilities and the cast of its output run in the
epilogue of the first grouped GEMM, and their backward in that of the second's data
gradient: the separate elementwise kernels and casts between the two GEMMs are gone. The
epilogue's own traffic (the saved pre-activation read again in the backward) is taken as
hidden under the GEMM's math, an assumption: no timing of the fused kernel is published."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..kernels import Kernel
from .transformer_lora import LoraShapes
from .transformer_shapes import ACT, elementwise, fp8_input_store

#: the experts' and LatentMoE's Transformer Engine modules, by their paths in Megatron-Core's
#: layer (a precision per module: :mod:`.transformer_precision`)
EXPERT_FC1, EXPERT_FC2 = "mlp.experts.linear_fc1", "mlp.experts.linear_fc2"
LATENT_FC1, LATENT_FC2 = "mlp.fc1_latent_proj", "mlp.fc2_latent_proj"

@dataclass(frozen=True)
class ExpertKernels(LoraShapes):
    """The experts' kernel tuples and sizes (none used by a dense model)."""

    # ------------------------------------------------------------------ mixture of experts
    @property
    def moe_tokens(self) -> int:
        """Tokens a rank routes: its sequence-parallel shard (Megatron-LM needs sequence
        parallelism with MoE and TP)."""
        return self.n_sp

    @property
    def expert_tokens(self) -> int:
        """Tokens each local expert receives: the EP group's routed tokens spread evenly over
        the experts, times the capacity factor."""
        s = self.spec
        return max(1, round(s.ep * self.moe_tokens * s.top_k * s.capacity_factor / s.experts))

    @property
    def expert_rows(self) -> int:
        """Tokens a local expert's GEMMs see on this rank: those it receives, gathered over
        the tensor-parallel ranks when it is split over them (``expert_tp = tp``: Megatron-
        Core's all-to-all dispatcher all-gathers the received tokens over TP after the
        all-to-all and reduce-scatters the experts' output before the one back)."""
        return self.expert_tokens * self.spec.expert_tp

    @property
    def expert_width(self) -> int:
        """The rank's share of an expert's inner width (``moe_ffn / expert_tp``)."""
        return self.spec.moe_ffn // self.spec.expert_tp

    @property
    def expert_fc1_width(self) -> int:
        """The rank's share of an expert's FC1 output: two halves gated, else its width."""
        return (2 if self.spec.gated_mlp else 1) * self.expert_width

    @property
    def expert_dim(self) -> int:
        """The width of the vectors the experts take and give: the latent one with
        ``moe_latent``, else the hidden one."""
        return self.spec.moe_latent or self.spec.hidden

    @property
    def dispatch_bytes(self) -> int:
        """Each rank's all-to-all buffer when dispatching (and combining) tokens."""
        s = self.spec
        return int(self.moe_tokens * s.top_k * s.capacity_factor * self.expert_dim * ACT)

    # ------------------------------------------------------------------ LatentMoE
    def _latent(self, width: int, k: int, module: str) -> tuple[Kernel, ...]:
        """A latent projection's GEMM (forward or data gradient) on the rank's routed tokens,
        none without ``moe_latent``."""
        return self._linear(width, k, self.moe_tokens, module=module) \
            if self.spec.moe_latent else ()

    @cached_property
    def latent_down(self) -> tuple[Kernel, ...]:
        """Hidden to latent on the rank's routed tokens, before the dispatch."""
        return self._latent(self.spec.moe_latent, self.spec.hidden, LATENT_FC1)

    @cached_property
    def latent_up(self) -> tuple[Kernel, ...]:
        """Latent to hidden, after the combine."""
        return self._latent(self.spec.hidden, self.spec.moe_latent, LATENT_FC2)

    @cached_property
    def latent_dgrads(self) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
        """The data gradients of the up projection (a down projection's shape) and of the
        down projection (an up projection's)."""
        s = self.spec
        return (self._latent(s.moe_latent, s.hidden, LATENT_FC2),
                self._latent(s.hidden, s.moe_latent, LATENT_FC1))

    @cached_property
    def latent_wgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        if not s.moe_latent:
            return ()
        return (self._gemm(s.hidden, s.moe_latent, self.moe_tokens, module=LATENT_FC2),
                self._gemm(s.moe_latent, s.hidden, self.moe_tokens, module=LATENT_FC1))

    @property
    def latent_parameters(self) -> int:
        """The two projections' weights (whole on every TP rank)."""
        return 2 * self.spec.hidden * self.spec.moe_latent

    @cached_property
    def permute(self) -> tuple[Kernel, ...]:
        """Each routed copy of a token gathered before the dispatch (read and written)."""
        return (elementwise(2 * self.dispatch_bytes, "moe_permute"),)

    @cached_property
    def unpermute(self) -> tuple[Kernel, ...]:
        """The copies read back after the combine and summed into one row per token."""
        return (elementwise(self.dispatch_bytes * (1 + 1 / self.spec.top_k),
                            "moe_unpermute"),)

    @cached_property
    def sort_chunks(self) -> tuple[Kernel, ...]:
        """The received copies grouped by local expert (none with one local expert)."""
        s = self.spec
        local = s.experts // s.ep
        if local == 1:
            return ()
        return (elementwise(2 * self.expert_rows * local * self.expert_dim * ACT,
                            "moe_sort_chunks"),)

    @cached_property
    def router(self) -> tuple[Kernel, ...]:
        s = self.spec
        return (self._gemm16(self.moe_tokens, s.experts, s.hidden),
                elementwise(2 * self.moe_tokens * s.experts * 4, "router_softmax_topk"))

    @cached_property
    def experts(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f, d = s.experts // s.ep, self.expert_rows, self.expert_width, self.expert_dim
        fc1 = self._gemm(m, self.expert_fc1_width, d, local, module=EXPERT_FC1)
        between: tuple[Kernel, ...] = () if s.fused_grouped_mlp else (
            elementwise((3 if s.gated_mlp else 2) * m * f * ACT * local, "expert_activation"),
            *fp8_input_store(s, m * self.expert_fc1_width * local, backward=False),
            *self._cast(m * f * local, module=EXPERT_FC2))
        return (*self._cast(m * d * local, module=EXPERT_FC1), fc1, *between,
                self._gemm(m, d, f, local, module=EXPERT_FC2))

    @cached_property
    def expert_activation_again(self) -> tuple[Kernel, ...]:
        """The experts' activation re-run before their backward (``recompute_modules:
        moe_act``), with its FP8 store's cast again, and in low precision FC2's input cast
        again from it (Megatron-Core keeps FC2's 16-bit input then,
        ``set_save_original_input``)."""
        s = self.spec
        local, m, f = s.experts // s.ep, self.expert_rows, self.expert_width
        return (elementwise((3 if s.gated_mlp else 2) * m * f * ACT * local, "expert_activation"),
                *fp8_input_store(s, m * self.expert_fc1_width * local, backward=False),
                *self._cast(m * f * local, module=EXPERT_FC2))

    @cached_property
    def experts_dgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f, d = s.experts // s.ep, self.expert_rows, self.expert_width, self.expert_dim
        fc1 = self.expert_fc1_width
        between: tuple[Kernel, ...] = () if s.fused_grouped_mlp else (
            *fp8_input_store(s, m * fc1 * local, backward=True),
            elementwise((5 if s.gated_mlp else 3) * m * f * ACT * local,
                        "expert_activation_backward"),
            *self._cast(m * fc1 * local, module=EXPERT_FC1))
        return (*self._cast(m * d * local, module=EXPERT_FC2),
                self._gemm(m, f, d, local, module=EXPERT_FC2),
                *between, self._gemm(m, d, fc1, local, module=EXPERT_FC1),
                self._gemm16(self.moe_tokens, s.hidden, s.experts))

    @cached_property
    def experts_wgrad(self) -> tuple[Kernel, ...]:
        s = self.spec
        local, m, f, d = s.experts // s.ep, self.expert_rows, self.expert_width, self.expert_dim
        return (self._gemm(f, d, m, local, module=EXPERT_FC2),
                self._gemm(d, self.expert_fc1_width, m, local, module=EXPERT_FC1),
                self._gemm16(s.hidden, s.experts, self.moe_tokens), *self.latent_wgrad)

    @cached_property
    def expert_parameters(self) -> int:
        """Weights of the rank's experts in one layer (0 for a dense model)."""
        s = self.spec
        if not s.experts:
            return 0
        return (s.experts // s.ep) * (3 if s.gated_mlp else 2) * self.expert_dim * \
            self.expert_width
