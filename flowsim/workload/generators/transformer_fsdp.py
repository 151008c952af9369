"""Fully sharded data parallelism (``fsdp``) on one pipeline stage: when each unit's
parameters are all-gathered and its gradients reduce-scattered, as PyTorch FSDP2 and
torchtitan run them (see :mod:`.transformer`, "fully sharded data parallel").

A *unit* is a transformer layer (``layer<i>``; a multi-token prediction depth's is
``layer<layers + j>``), the embedding or the output layer
(``logits``; the embedding's unit when the two are one tied weight on one stage). The
stage's program asks before a unit's compute (:meth:`FullySharded.unshard`) and tells after
its forward and its backward (:meth:`~FullySharded.after_forward`,
:meth:`~FullySharded.after_backward`); this module keeps which units are gathered and issues
the collectives. Without ``fsdp`` it does nothing.

What runs around the collectives is ``fsdp_impl``'s. PyTorch's FSDP2 (``fsdp2``) copies, on
the compute stream, each unit's gathered parameters out of the all-gather's buffer before
the unit runs (read and written in the gathered type) and its gradient into the reduction's
buffer, in the reduction's type, before the reduce-scatter
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``,
``foreach_all_gather_copy_out`` and ``foreach_reduce``). PyTorch's FSDP1 (``fsdp1``:
``FullyShardedDataParallel``, which Composer, LLM Foundry and NeMo 1 run) gathers into the
parameters' own buffer, but its post-backward hook casts the whole unsharded gradient to the
reduction's type when that differs from the parameters' (16 bits read, 32 written per
element), then divides it in place by the pre-divide factor, above 1 for any group of two
ranks or more (``torch/distributed/fsdp/_runtime_utils.py``, ``_post_backward_hook``; the
division in ``_comm_hooks/default_hooks.py``'s ``reduce_scatter_hook`` in PyTorch 2.0, in
``_runtime_utils.py``'s default path later). FSDP1 runs the two on its post-backward stream
beside the next unit's backward; flowsim prices them on the compute stream, an assumption
that gives the most they can cost. Megatron-FSDP (``megatron``) keeps parameters and
gradients in the buffers it communicates: nothing around the collectives.
"""

from __future__ import annotations

from ..kernels import Kernel
from . import transformer_values as tv
from .transformer_kernels import LayerKernels
from .transformer_mapping import StageContext
from .transformer_overlap import Frontier
from .transformer_passes import PassBuilder
from .transformer_shapes import ACT, elementwise
from .transformer_spec import TransformerSpec


class FullySharded:
    """The gathered units of one stage and the frontier the next all-gather follows.

    Parameters
    ----------
    spec, ctx, builder, kernels
        The stage's spec, context, op builder and layer kernels.
    grad_bytes : int
        Bytes per gradient element reduced.
    grad_ops : list of int
        The stage's gradient collectives (the optimizer step waits for them): reductions
        are appended to it.
    """

    def __init__(self, spec: TransformerSpec, ctx: StageContext, builder: PassBuilder,
                 kernels: LayerKernels, grad_bytes: int, grad_ops: list[int]) -> None:
        self.spec, self.ctx, self.b, self.k = spec, ctx, builder, kernels
        self.grad_bytes, self.grad_ops = grad_bytes, grad_ops
        #: units whose parameters are gathered now
        self.unsharded: set[str] = set()
        #: what the next unit's all-gather is issued after (prefetch: one unit ahead of the
        #: compute, as FSDP2 does)
        self.prefetch_after: Frontier = ()
        #: (unit, pass) whose shard the replicas gathered this step (``fsdp_outer: optim``)
        self.outer_gathered: set[tuple[str, str]] = set()
        #: units holding gradients of earlier micro-batches, their reduction deferred
        self.accumulated: set[str] = set()

    def unit(self, layer: int) -> str:
        """The unit of a layer or depth: a repeated depth's is the first depth's."""
        s = self.spec
        return f"layer{s.layers if s.mtp_repeated and layer > s.layers else layer}"

    def logits_unit(self) -> str:
        """The output layer's unit: the embedding's when the two are one tied weight."""
        return "embedding" if self.spec.one_tied_weight else "logits"

    def _parameters(self, unit: str) -> tuple[float, float, float]:
        """(dense, expert, the layers' dense weights) parameters of a unit."""
        if unit.startswith("layer"):   # a layer's, or a multi-token prediction depth's
            return self.k.unit_parameters(int(unit[len("layer"):]))
        return self.k.vocab_parameters, 0.0, 0.0

    def unshard(self, unit: str, name: str, layer: int, pass_: str, x: Frontier) -> Frontier:
        """The unit's parameters all-gathered over its sharding group unless they are still
        gathered, issued after the previous unit's inputs. Returns ``x`` with the
        all-gathers the unit's compute waits for."""
        if not self.spec.fsdp:
            return x
        if unit in self.unsharded:
            self.prefetch_after = x
            return x
        self.unsharded.add(unit)
        dense, expert, weights = self._parameters(unit)
        # the layers' weights (the experts' all weights) in their gathered bytes in the
        # layer's precision (one in FP8), the rest in two; block scaling gathers the layout
        # its pass needs, both where the forward's gather serves the backward too
        # (Transformer Engine's ``fsdp_pre_all_gather``)
        both = self.spec.fsdp_reshard != "after_forward" or self.spec.pp > 1
        own = self.k.of_layer(int(unit[len("layer"):])).spec if unit.startswith("layer") \
            else self.spec
        gathered = tv.weight_bytes(own, kept=both)
        dense -= weights * (2 - gathered) / 2
        expert *= gathered / 2
        gathers: list[int] = []
        outer = self._outer(unit, pass_)
        for params, (dims, size) in zip((dense, expert), self.ctx.shard_groups()):
            after = self.prefetch_after
            if params and outer:   # the step's first: the shard from its replicas' pieces
                after = (self.b.collective(
                    f"{name}.params.outer.all_gather", "all_gather",
                    int(2 * params / size / self.ctx.replicas), outer, layer, pass_, after),)
                gathers.extend(after)
            if params and dims:
                gathers.append(self.b.collective(
                    f"{name}.params.all_gather", "all_gather", int(2 * params / size), dims,
                    layer, pass_, after))
        if gathers and self.spec.fsdp_impl == "fsdp2":   # out of the all-gather's buffer
            gathers.append(self.b.compute(
                f"{name}.params.fsdp2_copy_out",
                (elementwise(2 * 2 * (dense + expert), "fsdp2_copy_out"),), layer, pass_,
                tuple(gathers)))
        x = (*x, *gathers)
        self.prefetch_after = x
        return x

    def _outer(self, unit: str, pass_: str) -> tuple[int, ...]:
        """The replicas' dims when a unit's gather in this pass is its first of the step
        under ``fsdp_outer: optim`` (Megatron-FSDP gathers the forward's and the backward's
        buffers in the first micro-batch), else none."""
        if self.spec.fsdp_outer != "optim" or (unit, pass_) in self.outer_gathered:
            return ()
        self.outer_gathered.add((unit, pass_))
        return self.ctx.groups.replicate

    def after_forward(self, unit: str) -> None:
        """FSDP2 frees a unit's gathered parameters after its forward, but for the output
        layer (and the tied weight it shares), whose backward comes next, under pipeline
        parallelism, where torchtitan keeps every unit gathered to its last backward, and
        with ``fsdp_reshard`` later than that."""
        if self.spec.pp == 1 and unit != self.logits_unit() and \
                self.spec.fsdp_reshard == "after_forward":
            self.unsharded.discard(unit)

    def after_backward(self, unit: str, name: str, layer: int, ready: int | None,
                       final: bool) -> None:
        """The unit's gradients reduce-scattered over its sharding group once its weight
        gradients are ready, the shards all-reduced over the replicas (hybrid sharding),
        and its parameters freed: every micro-batch (FSDP2's default), or under pipeline
        parallelism after the chunk's last backward (torchtitan's pipeline stages turn
        gradient sync and the free off for the others); ``fsdp_defer_grad_sync`` defers the
        reduction, ``fsdp_reshard: after_step`` the free, to the last backward."""
        spec = self.spec
        if not spec.fsdp:
            return
        if final or (spec.pp == 1 and spec.fsdp_reshard != "after_step"):
            self.unsharded.discard(unit)
        deferred = not final and (spec.pp > 1 or spec.fsdp_defer_grad_sync)
        if unit.startswith("layer") and unit != f"layer{layer}":   # a repeated depth's:
            return   # reduced once, after the first depth's backward (its last use)
        dense, expert, _ = self._parameters(unit)
        first: Frontier = () if ready is None else (ready,)
        accumulate, source = self._accumulate(unit, dense + expert, deferred)
        if deferred:
            if accumulate:
                self.b.compute(f"{name}.grads.{spec.fsdp_impl}_accumulate", accumulate,
                               layer, "wg", first)
            return
        replicate = self.ctx.groups.replicate if final or spec.fsdp_outer == "all_reduce" \
            else ()   # Megatron-FSDP's replicas reduce after the last micro-batch only
        outer = "reduce_scatter" if spec.fsdp_outer == "optim" else "all_reduce"
        prepare = (*accumulate, *self._prepare(dense, expert, source))
        if prepare:
            prepared = self.b.compute(f"{name}.grads.{spec.fsdp_impl}_prepare", prepare,
                                      layer, "wg", first)
            first = first if prepared < 0 else (prepared,)
        for params, (dims, size) in zip((dense, expert), self.ctx.shard_groups()):
            if not params:
                continue
            after: Frontier = first
            if dims:
                after = (self.b.collective(
                    f"{name}.grads.reduce_scatter", "reduce_scatter",
                    int(params * self.grad_bytes), dims, layer, "wg", after),)
            if replicate:
                after = (self.b.collective(
                    f"{name}.grads.{outer}", outer,
                    int(params * self.grad_bytes / size), replicate, layer, "wg", after),)
            self.grad_ops.extend(after)

    def _accumulate(self, unit: str, params: float, deferred: bool
                    ) -> tuple[tuple[Kernel, ...], int]:
        """A micro-batch's gradient added to the unit's earlier ones when the reduction is
        deferred (and at the reduction, the last one), with the bytes per element of what
        the reduction then reads. FSDP2 reducing in FP32 keeps an FP32 accumulator: the first
        gradient cast into it, each later one added (``FSDPParam``'s
        ``to_accumulated_grad_if_needed`` and ``accumulate_unsharded_grad_if_needed``);
        otherwise autograd adds each later gradient to the 16-bit one. Megatron-FSDP
        accumulates in its buffer, inside the weight-gradient GEMM: nothing."""
        if self.spec.fsdp_impl == "megatron":
            return (), ACT
        before = unit in self.accumulated
        (self.accumulated.add if deferred else self.accumulated.discard)(unit)
        wide = self.spec.fsdp_impl == "fsdp2" and self.grad_bytes > ACT
        held = self.grad_bytes if wide else ACT   # the accumulated gradient's bytes
        if before:
            return (elementwise(params * (2 * held + ACT), "fsdp_grad_accumulate"),), held
        if deferred and wide:
            return (elementwise(params * (ACT + held), "fsdp_grad_accumulate"),), held
        return (), ACT

    def _prepare(self, dense: float, expert: float, source: int) -> tuple[Kernel, ...]:
        """The kernels on a unit's unsharded gradient (``source`` bytes an element) before
        its reduction: FSDP2's copy into the reduction's buffer (in its type); FSDP1's cast
        to a 32-bit reduction (when the gradient is 16-bit) and in-place pre-divide of the
        parameters sharded over two ranks or more (a group of one has a factor of 1); none
        for Megatron-FSDP."""
        impl, params = self.spec.fsdp_impl, dense + expert
        if impl == "fsdp2":
            return (elementwise(params * (source + self.grad_bytes), "fsdp2_copy_in"),)
        if impl == "megatron":
            return ()
        cast = (elementwise(params * (ACT + self.grad_bytes), "fsdp1_grad_cast"),) \
            if self.grad_bytes > ACT else ()
        sharded = sum(part for part, (dims, _) in zip((dense, expert),
                                                      self.ctx.shard_groups()) if dims)
        divide = (elementwise(2 * sharded * self.grad_bytes, "fsdp1_grad_predivide"),) \
            if sharded else ()
        return (*cast, *divide)
