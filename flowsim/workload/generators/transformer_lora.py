"""Low-rank adaptation (``lora_rank``): LoRA fine-tuning (Hu et al., "LoRA: Low-Rank Adaptation
of Large Language Models", arXiv 2106.09685) as Megatron-Bridge runs it.

Every base weight is frozen; each linear layer of ``lora_targets`` (Megatron-Bridge's
``LoRA.target_modules``, by default all four: ``linear_qkv``, ``linear_proj``,
``linear_fc1``, ``linear_fc2``, ``src/megatron/bridge/peft/lora.py``) gains an adapter
``y += (alpha / r) B (A x)``, ``A`` of ``k x r`` and ``B`` of ``r x width`` for a ``k``-in,
``width``-out layer, in 16 bits
(also in FP8 training: the adapters are PyTorch linear layers). Per layer and micro-batch:

* forward: the base GEMM, the adapter's two GEMMs, and the scaling and the addition to the
  base output (read twice and written once, read and written once);
* backward: the base data gradient (the input's gradient is still needed), the adapter's
  two data-gradient GEMMs and two weight-gradient GEMMs, the scaling's backward and the
  addition of the adapter's input gradient to the base one; no weight gradient of any base
  weight, none of the embedding or the output layer (frozen: the embedding's backward is
  skipped altogether, as no input needs a gradient there);
* in FP8 training a frozen layer's casts write the one layout its data GEMMs read
  (Transformer Engine asks for the weight gradient's column-wise copy only when the weight
  requires a gradient): MXFP8 and NVFP4 write half their copies, Hopper's per-tensor casts
  no transpose;
* the data-parallel gradient reduction, the distributed optimizer's shards and gathers and
  the optimizer step cover the adapters alone (frozen weights have no gradient buffer and
  no optimizer state); a frozen layer without an adapter keeps no input for a weight
  gradient (QKV's and FC1's, their norms' outputs, and FC2's).

* over tensor parallelism, the adapters' own collectives, as Megatron-Bridge's
  ``ParallelLinearAdapter`` (``src/megatron/bridge/peft/utils.py``; NeMo 1's of the same
  name, ``nemo/collections/nlp/modules/common/megatron/adapters/parallel_adapters.py``)
  makes them: a column-parallel target's ``A`` is split by its output and the output
  all-gathered, ``B`` split like the base layer, and in the backward ``B``'s input
  gradient is all-reduced and, without sequence parallelism, ``A``'s too (with it the
  adapter reads the norm output Transformer Engine gathers for the base layer,
  ``return_layernorm_output_gathered``, and its gradient joins the base layer's
  reduce-scatter); a row-parallel target's ``A`` reads the rank's input slice and its
  output is all-reduced, ``B``'s output is split and all-gathered (then scattered to the
  sequence shard with sequence parallelism), and in the backward ``B``'s input gradient is
  all-reduced, after the output gradient is all-gathered with sequence parallelism.
  These are latency-bound except the whole-activation ones (a column target's ``A`` input
  gradient without SP, a row target's gathered output);
* under userbuffers (``tp_comm_overlap``) a column-parallel target returns its norm output,
  which turns Transformer Engine's overlapped all-gather off for it (``ub_overlap_ag_fprop``
  requires ``not return_layernorm_output``, ``module/layernorm_linear.py``, since TE 2.0;
  TE 1.x kept the ring exchange, not modelled): the layer's input is gathered by NCCL, not
  overlapped, and the adapter gathers it again itself and reduce-scatters its gradient
  (Megatron-Bridge and NeMo leave the adapter's sequence-parallel communication on when the
  layer overlaps its gather), except on QKV under ``tp_comm_overlap_disable_qkv``, whose
  adapter reads the gathered norm output; ``lora_a2a`` moves a row-parallel adapter's output
  to the sequence shard by one all-to-all (NeMo's ``all2all_hp2sp``);
* a frozen column-parallel layer gathers no input again in the backward
  (``ln_out_needs_gather`` asks for a weight that requires a gradient), with or without
  userbuffers.

Scope: dense layers (no experts, no latent attention, no multi-token prediction), no FSDP.
With sequence parallelism and no userbuffers, an adapted layer's input is gathered in 16 bits
(the norm output it returns is gathered unquantized, then cast), a frozen layer's in the one
layout its data gradient reads. Not modelled: the adapters' collectives run beside their
weight gradients (Megatron's asynchronous all-reduce: here in the stream's order), and under
userbuffers the base layer's reduce-scatter waits for the row-parallel adapter chain.
"""

from __future__ import annotations

from ..kernels import Kernel
from .transformer_choices import ROW_PARALLEL
from .transformer_shapes import ACT, LayerShapes, elementwise, tp_exchange


class LoraShapes(LayerShapes):
    """The adapters' kernels and parameters of one layer on one rank (nothing without
    ``lora_rank``)."""

    def _rank(self, target: str) -> int:
        """The adapter rank of ``target`` (0: no adapter there)."""
        return self.spec.lora_rank if target in self.spec.lora_targets else 0

    def _split(self, target: str, k: int, width: int) -> tuple[int, int, int, bool]:
        """The rank's adapter of ``target`` (a ``k``-in, ``width``-out layer on the rank):
        ``A``'s output and ``B``'s output widths, the tokens its output is added on, and
        whether ``target`` is row-parallel. A column-parallel layer's ``A`` is split over TP
        by its output (``r / t``, gathered after it), ``B`` like the base layer; a
        row-parallel layer's ``A`` reads the rank's input slice (its output all-reduced),
        ``B``'s output is split (``width / t``, gathered after it), and with sequence
        parallelism the sum is the sequence shard's (scattered, as the base output is)."""
        r, t = self._rank(target), self.spec.tp
        if target in ROW_PARALLEL:
            return r, width // t, self.n_sp, True
        return r // t, width, self.n, False

    def lora_forward(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """The adapter of ``target`` in the forward: ``A``, ``B``, then the scaling and the
        addition to the base output; over TP with the adapter's own collectives between
        them (a column-parallel layer's ``A`` output gathered; a row-parallel one's ``A``
        output all-reduced and ``B`` output gathered)."""
        r = self._rank(target)
        if not r:
            return ()
        a, b, out, row = self._split(target, k, width)
        n, t = self.n, self.spec.tp
        mid = tp_exchange("all_reduce" if row else "all_gather",
                          n * (r if row else a) * ACT, "lora_in")
        end = (tp_exchange(self._out_exchange, n * b * ACT, "lora_out"),) if row else ()
        start = () if row or not self._gathers_input(target) else \
            (tp_exchange("all_gather", self.n_sp * k * ACT, "lora_input"),)
        return (*start, self._gemm16(n, a, k), *((mid,) if t > 1 else ()),
                self._gemm16(n, b, r), *(end if t > 1 else ()),
                elementwise(5 * out * width * ACT, "lora_scale_add"))

    def _gathers_input(self, target: str) -> bool:
        """Whether a column-parallel adapter gathers its sequence-parallel input itself:
        under userbuffers (Transformer Engine's overlapped all-gather keeps the gathered
        norm output to itself, so Megatron-Bridge's ``get_adapter_attributes_from_linear``
        leaves the adapter's ``gather_from_sequence_parallel_region`` on), and then
        reduce-scatters its input gradient; not on QKV when userbuffers leave QKV's gather
        to NCCL (``tp_comm_overlap_disable_qkv``: the adapter reads the gathered norm
        output, its gradient joins the layer's reduce-scatter)."""
        s = self.spec
        return s.tp > 1 and s.sp and s.tp_comm_overlap and \
            not s.nccl_gathers(target.removeprefix("linear_"))

    @property
    def _out_exchange(self) -> str:
        """How a row-parallel adapter's ``B`` output (split by its width) reaches the
        sequence shard and back: one all-to-all with ``lora_a2a`` and sequence parallelism
        (NeMo's ``all2all_hp2sp``), else gathered whole (then split; with sequence
        parallelism, the backward gathers the shard's gradient)."""
        return "all_to_all" if self.spec.lora_a2a and self.spec.sp else "all_gather"

    def lora_dgrad(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """Its data gradient: the scaling's backward, through ``B`` and ``A``, added to the
        base layer's input gradient; over TP with the gradients of the forward's
        collectives: ``B``'s input gradient all-reduced, a column-parallel ``A``'s too
        without sequence parallelism (with it the base layer's reduce-scatter carries it:
        Transformer Engine returns the gathered norm output the adapter reads), and with
        it a row-parallel adapter's output gradient gathered first."""
        r = self._rank(target)
        if not r:
            return ()
        a, b, out, row = self._split(target, k, width)
        n, s = self.n, self.spec
        first: tuple[Kernel, ...] = ()
        mid: tuple[Kernel, ...] = ()
        last: tuple[Kernel, ...] = ()
        if s.tp > 1:
            if row and s.sp:   # the sequence shard's gradient gathered (the scatter's)
                first = (tp_exchange(self._out_exchange, out * width * ACT, "lora_out"),)
            mid = (tp_exchange("all_reduce", n * r * ACT, "lora_mid"),)   # B's input
            if not row and not s.sp:   # A's input: the full activation, all-reduced
                last = (tp_exchange("all_reduce", n * k * ACT, "lora_in"),)
            elif not row and self._gathers_input(target):   # the gather's gradient
                last = (tp_exchange("reduce_scatter", n * k * ACT, "lora_input"),)
        return (elementwise(2 * out * width * ACT, "lora_scale_backward"), *first,
                self._gemm16(n, r, b), *mid, self._gemm16(n, k, a), *last,
                elementwise(3 * n * k * ACT, "lora_add_backward"))

    def lora_wgrad(self, target: str, k: int, width: int) -> tuple[Kernel, ...]:
        """Its weight gradients: ``B``'s and ``A``'s."""
        r = self._rank(target)
        if not r:
            return ()
        a, b, _, _ = self._split(target, k, width)
        return (self._gemm16(r, b, self.n), self._gemm16(k, a, self.n))

    def head_wgrads(self, target: str) -> int:
        """How many weight-gradient kernels of a block belong to its head, the row-parallel
        ``target`` (the rest are the column-parallel tail's): its GEMM's, or under LoRA its
        adapter's two (none without one)."""
        if not self.spec.frozen:
            return 1
        return len(self.lora_wgrad(target, *self.lora_widths[target]))

    @property
    def lora_widths(self) -> dict[str, tuple[int, int]]:
        """(in, out) widths of the layers an adapter can target, on the rank."""
        h = self.spec.hidden
        return {"linear_qkv": (h, self.q + 2 * self.kv), "linear_proj": (self.q, h),
                "linear_fc1": (h, self.fc1_out), "linear_fc2": (self.f, h)}

    @property
    def lora_parameters(self) -> int:
        """Weights of one layer's adapters on the rank (``A``'s ``k a`` and ``B``'s
        ``r b`` each)."""
        total = 0
        for target, (k, width) in self.lora_widths.items():
            if self._rank(target):
                a, b, _, _ = self._split(target, k, width)
                total += k * a + self._rank(target) * b
        return total
