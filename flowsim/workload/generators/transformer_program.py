"""One pipeline stage's program for one training iteration: its schedule of forward and
backward passes over micro-batches and model chunks (the last virtual stage's with the
multi-token prediction depths: :mod:`.transformer_mtp`), the pipeline sends and receives
between virtual stages (:mod:`.transformer_p2p`), the data-parallel gradient collectives in
buckets, the optimizer step and the distributed optimizer's parameter all-gathers; or, with
``fsdp``, fully sharded data parallelism's per-layer parameter all-gathers and gradient
reduce-scatters."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from functools import partial

from ..graph import Op
from . import transformer_values as tv
from .transformer_buckets import GatherBucket, GatherGroup, ParameterGathers, ParamUnit, partition
from .transformer_combined import beside, paired_forwards
from .transformer_fsdp import FullySharded
from .transformer_mapping import StageContext
from .transformer_mla import layer_kernels
from .transformer_mtp import MultiTokenPrediction
from .transformer_offload import ActivationOffload
from .transformer_optimizer import optimizer_step
from .transformer_p2p import PipelineMessages
from .transformer_passes import Frontier, PassBuilder
from .transformer_recompute import recompute_matmuls, recompute_modules
from .transformer_schedule import layer_counts, neighbours, pass_tag, stage_schedule, virtual_stage
from .transformer_spec import TransformerSpec
from .transformer_zero_bubble import WeightPasses

#: Megatron-Core's gradient bucket size: max(40 M, 1 M x data-parallel size) parameters
BUCKET_PARAMS = 40_000_000
BUCKET_PARAMS_PER_RANK = 1_000_000


def layer_names(spec: TransformerSpec) -> list[str]:
    """The per-layer breakdown's rows: the transformer layers, the multi-token prediction
    depths, then the embedding and the output layer (with a vocabulary) and the optimizer
    step."""
    names = [f"layer{i}" for i in range(spec.layers)]
    names += [f"mtp{j}" for j in range(spec.mtp_layers)]
    if spec.vocab:
        names += ["embedding", "logits"]
    return names + ["optimizer"]


class StageProgram:
    """Builds the ops of one pipeline rank (see the module docstring)."""

    def __init__(self, spec: TransformerSpec, ctx: StageContext,
                 activation_bytes: Callable[[StageProgram, int], float]) -> None:
        self.spec, self.ctx = spec, ctx
        self.k = layer_kernels(spec)
        self.b = PassBuilder(spec, ctx.groups, self.k)
        self.p2p = PipelineMessages(self.b, self.k, ctx)
        counts = layer_counts(spec)
        starts = [sum(counts[:i]) for i in range(len(counts))]
        self.layers = {c: range(starts[vs], starts[vs] + counts[vs]) for c in range(spec.vpp)
                       for vs in [virtual_stage(spec, ctx.stage, c)]}
        names = layer_names(spec)
        self.row = {name: i for i, name in enumerate(names)}
        self.last_vs = spec.pp * spec.vpp - 1
        self.grad_bytes = 4 if spec.dtype in ("bf16", "fp8") and not spec.grad_reduce_in_bf16 \
            else 2
        self.grad_ops: list[int] = []
        #: the distributed optimizer's parameter all-gathers (none without it, or with fsdp)
        aligned = (spec.align_param_gather and spec.overlap_param_gather and spec.pp > 1
                   and spec.interleaved)
        self.gathers = ParameterGathers(self.b, self._gather_groups(), self.row["optimizer"],
                                        aligned=aligned)
        #: gradients reduced a chunk at a time at points aligned over the pipeline (else
        #: bucket by bucket as the last backward makes them ready)
        self.aligned_grads = (spec.align_grad_reduce and spec.pp > 1 and not spec.fsdp
                              and spec.overlap_grad_reduce and spec.schedule != "dualpipev")
        self.ready_grads: dict[int, list[tuple[tuple[float, float], Frontier]]] = {}
        #: fully sharded data parallelism's gathers and reductions (nothing without fsdp)
        self.fsdp = FullySharded(spec, ctx, self.b, self.k, self.grad_bytes, self.grad_ops)
        #: the multi-token prediction depths, on the last virtual stage (none without them)
        self.mtp = MultiTokenPrediction(self.b, self.k, self.gathers, self.fsdp,
                                        self.row["logits"]) if spec.mtp_layers else None
        #: copies to host memory (none without them) of a layer's activations
        self.offload = ActivationOffload(spec, self.b, partial(activation_bytes, self))

    # ------------------------------------------------------------------ the whole stage
    def build(self) -> list[Op]:
        """The stage's ops for one iteration, in the order its host issues them."""
        spec, b = self.spec, self.b
        order = stage_schedule(spec, self.ctx.stage)
        ddp = not spec.fsdp   # Megatron's DDP, with or without the distributed optimizer
        if spec.overlap_param_gather:
            self.gathers.start()
        forwards = [u for u in order if u[0] == "fwd"]
        paired = paired_forwards(spec, self.ctx.stage)
        b.module_offload.plan(order, paired)
        backwards = [u for u in order if u[0] == "bwd"]
        # each chunk's last backward (by its index among the backwards) -> the chunk
        finals = {max(j for j, u in enumerate(backwards) if u[1] == c): c
                  for c in range(spec.vpp)}
        passes = {"fwd": 0, "bwd": 0}   # passes so far: Megatron's virtual micro-batch ids

        def steps(pass_: str, chunk: int, m: int) -> Iterator[None]:
            """A pass, a layer at a time."""
            index = passes[pass_]
            passes[pass_] += 1
            if pass_ == "fwd":
                if self.gathers.aligned:
                    self._align_gathers(forwards, index + self.ctx.stage)
                yield from self._forward(chunk, m)
                return
            yield from self._backward(chunk, m, final=index in finals)
            if self.aligned_grads and spec.vpp > 1:   # shifted by the pipeline rank
                shifted = index - self.ctx.stage
                if shifted in finals:
                    self._reduce_ready(finals[shifted])

        weights = WeightPasses(spec, self.ctx.stage, b)   # zero bubble (DualPipeV)
        for i, unit in enumerate(order):
            weights.run(i)
            if i in paired:   # the forward, then the backward beside it
                beside(self.b, self.row["optimizer"], steps(*unit), steps(*order[i + 1]))
            elif i - 1 not in paired:
                with weights.backward(i):
                    deque(steps(*unit), maxlen=0)
        weights.run(len(order))
        for c in sorted(self.ready_grads):   # the rest: after the stage's last backward
            self._reduce_ready(c)
        if ddp and not spec.overlap_grad_reduce:   # reduced after the whole backward
            end = _frontier(b.last)
            for c in range(spec.vpp):
                self._reduce_gradients(c, [(self.chunk_parameters(c), end)])
        step = b.compute("optimizer", optimizer_step(self),
                         self.row["optimizer"], "wg", tuple(self.grad_ops))
        if not spec.overlap_param_gather:
            self.gathers.all_after(step)
        return b.ops

    def _reduce_ready(self, chunk: int) -> None:
        """Aligned reductions: every bucket of a chunk whose gradients are all ready, now
        (Megatron's ``grad_sync_func``)."""
        now = _frontier(self.b.last)
        self._reduce_gradients(chunk, [(params, now) for params, _ in
                                       self.ready_grads.pop(chunk)])

    def _align_gathers(self, forwards: list[tuple[str, int, int]], shifted: int) -> None:
        """Aligned gathers: a forward whose virtual micro-batch shifted by the pipeline rank
        is a chunk's first starts the gathers of the chunk after it (Megatron-Core's
        interleaved schedule; chunks 0 and 1 start with the iteration)."""
        if shifted < len(forwards) and forwards[shifted][2] == 0:
            chunk = forwards[shifted][1] + 1
            if 1 < chunk < self.spec.vpp:
                self.gathers.gather_chunk(chunk, _frontier(self.b.last))

    # ------------------------------------------------------------------ passes
    def _peers(self, chunk: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """The previous and the next virtual stage's ``(rank, chunk)`` where a message
        crosses to them: None at the ends, and on this rank (DualPipeV's turn)."""
        before, after = neighbours(self.spec, self.ctx.stage, chunk)
        return (None if before is None or before[0] == self.ctx.stage else before,
                None if after is None or after[0] == self.ctx.stage else after)

    def _forward(self, chunk: int, m: int) -> Iterator[None]:
        """A forward pass, paused after each layer."""
        spec, b, k = self.spec, self.b, self.k
        vs = virtual_stage(spec, self.ctx.stage, chunk)
        before, after = self._peers(chunk)
        tag = pass_tag(spec, chunk, m)
        b.module_offload.begin_forward(chunk, m, self.chunk_units(chunk))
        x: Frontier = ()
        first = self.layers[chunk][0] if len(self.layers[chunk]) else self.row["optimizer"]
        if before is not None:
            x = self.p2p.receive(f"{tag}.recv_activation", before, self.p2p.tag(m, vs - 1, 0),
                                 first, "fwd")
        carry: tuple = ()
        if vs == 0 and spec.vocab:
            row = self.row["embedding"]
            x = self.gathers.reach("embedding", x)
            x = self.fsdp.unshard("embedding", f"{tag}.embedding", row, "fwd", x)
            x = b.tp_block(f"{tag}.embedding", k.embedding, row, "fwd", x, gather=False,
                           reduce=True)
            self.fsdp.after_forward("embedding")
        for layer in self.layers[chunk]:
            x = self.gathers.reach(layer, x)
            x = self.fsdp.unshard(f"layer{layer}", f"{tag}.layer{layer}", layer, "fwd", x)
            x = b.forward(layer, tag, self.offload.before_forward(layer, tag, x), carry)
            self.fsdp.after_forward(f"layer{layer}")
            carry = b.residual
            yield
        if vs == self.last_vs and spec.vocab:
            row = self.row["logits"]
            x = self.gathers.reach("logits", x)
            x = self.fsdp.unshard(self.fsdp.logits_unit(), f"{tag}.logits", row, "fwd", x)
            x = (b.compute(f"{tag}.final_norm", carry + k.norm, row, "fwd", x),)
            if self.mtp is not None:
                self.mtp.forward(tag, x)
            x = b.tp_block(f"{tag}.logits", k.logits, row, "fwd", x, gather=True, reduce=False)
            self.fsdp.after_forward(self.fsdp.logits_unit())
        elif carry:
            x = (b.compute(f"{tag}.residual", carry, self.layers[chunk][-1], "fwd", x),)
        if after is not None:
            self.p2p.send(f"{tag}.send_activation", after, self.p2p.tag(m, vs, 0),
                          self.layers[chunk][-1] if len(self.layers[chunk]) else first, "fwd",
                          x)

    def _backward(self, chunk: int, m: int, *, final: bool) -> Iterator[None]:
        """A backward pass, paused after each layer."""
        spec, b, k = self.spec, self.b, self.k
        vs = virtual_stage(spec, self.ctx.stage, chunk)
        before, after = self._peers(chunk)
        tag = pass_tag(spec, chunk, m)
        b.module_offload.begin_backward(chunk, m)
        own = self.layers[chunk]
        top = own[-1] if len(own) else self.row["optimizer"]
        g: Frontier = ()
        buckets: list[tuple[tuple[float, float], Frontier]] = []
        if after is not None:
            g = self.p2p.receive(f"{tag}.recv_gradient", after, self.p2p.tag(m, vs, 1), top, "ig")
        carry: tuple = ()
        if vs == self.last_vs and spec.vocab:
            row = self.row["logits"]
            g = self.fsdp.unshard(self.fsdp.logits_unit(), f"{tag}.logits.dgrad", row, "ig", g)
            depths = () if self.mtp is None else self.mtp.backward(tag, g, final, buckets)
            g = (*b.output_backward(f"{tag}.logits", row, g), *depths)
            if not spec.one_tied_weight:   # else one weight, in the embedding's bucket
                b.after_wgrad(partial(self._ready, buckets, (k.vocab_parameters, 0), "logits",
                                      f"{tag}.logits", row, final))
            carry = k.norm_backward
        for layer in reversed(own):
            g = self.offload.before_backward(layer, tag, g)
            g = self.fsdp.unshard(f"layer{layer}", f"{tag}.layer{layer}", layer, "ig", g)
            if spec.is_recomputed(layer, layer - own.start):
                g = (*g, *b.forward(layer, f"{tag}.recompute", ()))
            elif spec.recompute == "every_other_matmul":
                g = (*g, *recompute_matmuls(b, layer, tag))
            elif spec.recompute == "selective":
                g = (*g, *recompute_modules(b, layer, tag))
            g = b.backward(layer, tag, g, carry)
            carry = b.norm_backward
            b.after_wgrad(partial(self._ready, buckets, self._layer_parameters(layer),
                                  f"layer{layer}", f"{tag}.layer{layer}", layer, final))
            yield
        if vs == 0 and spec.vocab:
            row = self.row["embedding"]
            g = self.fsdp.unshard("embedding", f"{tag}.embedding", row, "ig", g)
            b.embedding_backward(f"{tag}.embedding", row, g, carry)
            b.after_wgrad(partial(self._ready, buckets, (k.vocab_parameters, 0), "embedding",
                                  f"{tag}.embedding", row, final))
        elif carry:
            g = (b.compute(f"{tag}.norm_backward", carry, own[0] if len(own) else top, "ig",
                           g),)
        if before is not None:
            self.p2p.send(f"{tag}.send_gradient", before, self.p2p.tag(m, vs - 1, 1),
                          own[0] if len(own) else top, "ig", g)
        if vs == self.last_vs and spec.vocab and spec.metric_cross_entropies:
            b.compute(f"{tag}.train_metrics", k.train_metrics, self.row["logits"], "fwd")
        if final and spec.overlap_grad_reduce and not spec.fsdp:
            if self.aligned_grads and (spec.vpp > 1 or self.ctx.stage > 0):
                self.ready_grads[chunk] = buckets   # reduced at the aligned point
            else:   # as each bucket is ready
                b.after_wgrad(partial(self._reduce_gradients, chunk, buckets))

    def _ready(self, buckets: list[tuple[tuple[float, float], Frontier]],
               params: tuple[float, float], unit: str, name: str, row: int,
               final: bool) -> None:
        """A unit's weight gradients are done: into the chunk's buckets, and FSDP's
        reduction."""
        buckets.append((params, _frontier(self.b.last_wgrad)))
        self.fsdp.after_backward(unit, name, row, self.b.last_wgrad, final)

    # ------------------------------------------------------------------ data parallelism
    def _layer_parameters(self, layer: int) -> tuple[float, float]:
        dense, expert, _ = self.k.unit_parameters(layer)
        return dense, expert

    def _depths(self, chunk: int) -> range:
        """The multi-token prediction depths a chunk holds (the last virtual stage's)."""
        last = virtual_stage(self.spec, self.ctx.stage, chunk) == self.last_vs
        return self.spec.mtp_depths if last else range(0)

    def chunk_units(self, chunk: int) -> list[int]:
        """A chunk's layers and multi-token prediction depths, in model order."""
        return [*self.layers[chunk], *self._depths(chunk)]

    def dense_weights(self, chunk: int) -> float:
        """The dense weights of a chunk's layers (FP8 parameter gathers send them in one
        byte each)."""
        return sum(self.k.unit_parameters(layer)[2] for layer in self.chunk_units(chunk))

    def chunk_parameters(self, chunk: int) -> tuple[float, float]:
        """(dense, expert) parameters of a model chunk on this rank."""
        vs = virtual_stage(self.spec, self.ctx.stage, chunk)
        dense: float = 0
        expert: float = 0
        for layer in self.chunk_units(chunk):
            layer_dense, layer_expert, _ = self.k.unit_parameters(layer)
            dense, expert = dense + layer_dense, expert + layer_expert
        if self.spec.vocab:
            copies = (vs == 0) + (vs == self.last_vs) - self.spec.one_tied_weight
            dense += self.k.vocab_parameters * copies
        return dense, expert

    def local_parameters(self) -> float:
        """Parameters this rank's optimizer updates (its shard with a distributed
        optimizer)."""
        spec, ctx = self.spec, self.ctx
        dense = sum(self.chunk_parameters(c)[0] for c in range(spec.vpp))
        expert = sum(self.chunk_parameters(c)[1] for c in range(spec.vpp))
        if spec.fsdp and spec.fsdp_outer != "optim":   # (optim: the replicas split it too)
            (_, dense_shard), (_, expert_shard) = ctx.shard_groups()
            return dense / dense_shard + expert / expert_shard
        if spec.sharded_optimizer or spec.fsdp:
            return dense / ctx.dp_size + expert / ctx.expert_dp_size
        return dense + expert

    def _bucket_limit(self) -> float:
        if self.spec.bucket_size:
            return self.spec.bucket_size
        return max(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * self.ctx.dp_size)

    def _reduce_gradients(self, chunk: int,
                          items: list[tuple[tuple[float, float], Frontier]]) -> None:
        """Gradient collectives of a chunk's buckets; ``items`` are ((dense, expert)
        parameters, frontier of the op after which their gradients are ready), in the order
        they become ready."""
        for group, dims, index in (("dense", self.ctx.groups.dp, 0),
                                   ("expert", self.ctx.groups.expert_dp, 1)):
            if not dims:
                continue
            for bucket in partition((entry[index] for entry, _ in items),
                                    self._bucket_limit()):
                params = 0.0
                for i in bucket:
                    params += items[i][0][index]
                self._grad_collective(group, dims, params, items[bucket[-1]][1])

    def _grad_collective(self, group: str, dims: tuple[int, ...], params: float,
                         after: Frontier) -> None:
        kind = "reduce_scatter" if self.spec.distributed_optimizer else "all_reduce"
        self.grad_ops.append(self.b.collective(
            f"{group}_grads.{kind}", kind, int(params * self.grad_bytes), dims,
            self.row["optimizer"], "wg", after))

    def units(self, chunk: int) -> list[tuple[ParamUnit, tuple[float, float], float]]:
        """A chunk's units of parameters in backward order, the order their gradients become
        ready: (unit, (dense, expert) parameters, dense layer weights)."""
        spec, k = self.spec, self.k
        vs = virtual_stage(spec, self.ctx.stage, chunk)
        units: list[tuple[ParamUnit, tuple[float, float], float]] = [
            (layer, (dense, expert), fp8) for layer in reversed(self._depths(chunk))
            for dense, expert, fp8 in [k.unit_parameters(layer)]]
        if vs == self.last_vs and spec.vocab and not spec.one_tied_weight:
            units.append(("logits", (k.vocab_parameters, 0.0), 0.0))
        for layer in reversed(self.layers[chunk]):
            dense, expert, fp8 = k.unit_parameters(layer)
            units.append((layer, (dense, expert), fp8))
        if vs == 0 and spec.vocab:   # with one tied weight, the logits' too
            units.append(("embedding", (k.vocab_parameters, 0.0), 0.0))
        return units

    def _gather_groups(self) -> list[GatherGroup]:
        """The distributed optimizer's all-gathers of the updated 16-bit parameters over the
        gradient buckets (see :mod:`.transformer_buckets`): the dense ones over the
        data-parallel group, the experts' over the expert-data-parallel group their optimizer
        state is sharded over; with ``fp8_param_gather`` the layers' weights (experts
        included) in their kept bytes (:func:`.transformer_values.weight_bytes`: one in FP8,
        MXFP8's two), the vocabulary's in two."""
        spec, ctx = self.spec, self.ctx
        if not spec.sharded_optimizer or spec.fsdp:
            return []
        weight_bytes = tv.weight_bytes(spec)
        # Megatron-Core buckets only to overlap the gradients' reduction (else one bucket, as
        # dist_muon's one gather of all of a rank's weights)
        limit = self._bucket_limit() if spec.overlap_grad_reduce and \
            spec.distributed_optimizer else float("inf")
        out = []
        for name, dims, ranks, index in (("params", ctx.groups.dp, ctx.dp_size, 0),
                                         ("expert_params", ctx.groups.expert_dp,
                                          ctx.expert_dp_size, 1)):
            buckets: list[GatherBucket] = []
            for chunk in range(spec.vpp):
                units = self.units(chunk)
                for bucket in reversed(partition((u[1][index] for u in units), limit)):
                    params = sum(units[i][1][index] for i in bucket)
                    weights = sum(units[i][2] for i in bucket) if index == 0 else params
                    nbytes = round(2 * params - (2 - weight_bytes) * weights)
                    buckets.append(GatherBucket(units[bucket[-1]][0], nbytes, chunk))
            if buckets and not spec.distributed_optimizer:   # dist_muon: one gather of all
                buckets = [GatherBucket(buckets[0].first, sum(b.nbytes for b in buckets), 0)]
            if dims and buckets:
                out.append(GatherGroup(name, dims, ranks, tuple(buckets)))
        return out


def _frontier(op: int | None) -> Frontier:
    """The op as a frontier (empty when there is none yet)."""
    return () if op is None else (op,)
