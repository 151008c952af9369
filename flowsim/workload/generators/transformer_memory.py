"""Device memory one GPU of a pipeline stage needs: weights, gradients, optimizer states and
the activations its schedule keeps in flight, the estimate a cluster planner checks a
layout against before simulating it.

Per parameter (Megatron-LM's mixed-precision training with Adam): 16-bit weights (the
layers' in FP8 with ``fp8_param_gather`` and tensor scaling, in NVFP4's two layouts under
``nvfp4``: :func:`.transformer_values.weight_bytes`), FP32 gradient buffers (16-bit with
``grad_reduce_in_bf16``) and 12 bytes of optimizer state (FP32 master weights, Adam's two
moments; Muon's 8 for the layers' weights: :mod:`.transformer_optimizer`), the states
sharded over the data-parallel ranks by the distributed optimizer and everything by ``fsdp``
over its sharding group (which keeps the largest unit gathered and the next one's prefetch,
or, under pipelining, every unit and its unsharded gradients from its first forward to its
last backward; with ``fsdp_outer: optim`` the optimizer states over every data-parallel
rank).

Activations per layer and micro-batch: :mod:`.transformer_activations` (in FP8, the
quantized copies of the linear layers' inputs). The output layer keeps its logits for the
cross entropy, in FP32 (in 16 bits under Transformer Engine's, flash-attn's and compiled
ones), and so does each multi-token prediction depth, beside its layer's activations and its
inputs'. Offloaded activations are on the host at the peak, the end of a forward:
``cpu_offload_layers``' layers, and ``offload_modules``' groups but each chunk's last of
each kind (:func:`_module_offloads`). How many micro-batches a stage holds comes from the
schedule it runs (1F1B's warm-up, the interleaved schedule's extra chunks).

Left out: the CUDA context and library workspaces (about 1 GB), communication buffers
(NCCL's and Transformer Engine's userbuffers), the allocator's fragmentation, temporary
buffers inside kernels (and the FP32 copies of the logits the training metrics' cross
entropies make after a backward). Real runs need several GB more than the estimate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import transformer_values as tv
from .transformer_activations import layer_activations, whole_layer
from .transformer_checks import micro_batches
from .transformer_combined import paired_forwards
from .transformer_module_offload import KINDS, offloaded_bytes
from .transformer_optimizer import state_bytes
from .transformer_saved import Saved, saved_inputs
from .transformer_schedule import stage_schedule, virtual_stage
from .transformer_shapes import ACT, CROSS_ENTROPY

if TYPE_CHECKING:
    from .transformer_program import StageProgram
    from .transformer_spec import TransformerSpec


@dataclass(frozen=True)
class StageMemory:
    """Bytes one GPU of a pipeline stage holds at its peak."""

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def as_dict(self) -> dict[str, float]:
        return {"stage": self.stage, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "total": self.total}


def stage_memory(program: StageProgram) -> StageMemory:
    """The memory of one GPU running ``program`` (see the module docstring)."""
    spec, ctx, k = program.spec, program.ctx, program.k
    chunks = range(spec.vpp)
    dense = sum(program.chunk_parameters(c)[0] for c in chunks)
    expert = sum(program.chunk_parameters(c)[1] for c in chunks)
    params = dense + expert
    layer_weights = sum(program.dense_weights(c) for c in chunks)   # kept in low precision
    weights = ACT * params - (ACT - tv.weight_bytes(spec, kept=True)) * layer_weights
    gradients = program.grad_bytes * params
    if spec.frozen:   # the base weights beside the adapters: no gradients, no state
        base = type(program)(replace(spec, lora_rank=0), ctx, layer_activation_bytes)
        weights += sum(ACT * sum(base.chunk_parameters(c)) - (ACT - tv.weight_bytes(
            spec, kept=True)) * base.dense_weights(c) for c in chunks)
    optimizer = state_bytes(program)
    if spec.fsdp and spec.pp == 1:   # the largest unit gathered and the next one prefetched
        (_, dense_shard), (_, expert_shard) = ctx.shard_groups()
        shards = dense / dense_shard + expert / expert_shard   # the unit's shards kept
        unit = max(max(sum(k.unit_parameters(i)[:2])
                       for i in range(spec.layers + spec.mtp_layers)),
                   k.vocab_parameters if spec.vocab else 0)
        if spec.fsdp_reshard == "after_forward":   # else every unit gathered at the peak
            weights = weights / params * (shards + 2 * unit)
        if not spec.fsdp_defer_grad_sync or micro_batches(spec) == 1:   # else every unit's
            # gradients accumulate whole
            gradients = program.grad_bytes * (shards + 2 * unit)
    # under pipelining every unit stays gathered, its gradients unsharded, to the last
    # backward: the weights and gradients of Megatron's DDP
    return StageMemory(ctx.stage, weights, gradients, optimizer, _activations(program))


def _activations(program: StageProgram) -> float:
    """Peak bytes of the activations kept for backward passes, over the stage's schedule."""
    spec = program.spec
    moved = _module_offloads(program)
    chunk_layers, transient = _chunk_activations(program, moved)
    logits = CROSS_ENTROPY[spec.cross_entropy].kept * program.k.n * program.k.vocab_shard \
        if spec.vocab else 0
    # the last stage's logits, and its multi-token prediction depths' (less their offloads)
    top = logits + spec.mtp_layers * (_depth_activations(program) + logits) - \
        sum(moved.get(i, 0.0) for i in spec.mtp_depths)

    def kept(chunk: int) -> float:   # a micro-batch's
        last = virtual_stage(spec, program.ctx.stage, chunk) == program.last_vs
        return chunk_layers[chunk] + (top if last else 0)

    held = dict.fromkeys(range(spec.vpp), 0)
    peak = 0.0
    paired = paired_forwards(spec, program.ctx.stage)
    order = stage_schedule(spec, program.ctx.stage)
    for i, (pass_, chunk, _) in enumerate(order):
        held[chunk] += 1 if pass_ == "fwd" else -1
        if pass_ != "fwd":
            continue
        now = sum(count * kept(c) for c, count in held.items())
        if i in paired:   # the backward beside it frees a layer as this forward keeps one:
            # at the peak one layer of the forward, or what it keeps beyond what the
            # backward frees (DualPipeV pairs passes of different chunks)
            layer = chunk_layers[chunk] / max(1, len(program.layers[chunk]))
            now += max(layer, kept(chunk) - kept(order[i + 1][1])) - kept(chunk)
        peak = max(peak, now)
    return peak + transient


def _depth_activations(program: StageProgram) -> float:
    """Bytes one multi-token prediction depth keeps per micro-batch besides its logits: its
    embedding and the hidden state it is given, and unless it is recomputed
    (:meth:`~.transformer_spec.TransformerSpec.is_recomputed`) their concatenation (the
    projection's input) and its layer's whole activations (of the last layer's kind)."""
    spec, k = program.spec, program.k
    inputs = 2 * ACT * k.n * spec.hidden / (spec.tp if spec.sp else 1)
    if spec.is_recomputed(spec.layers, 0):
        return inputs
    return 2 * inputs + whole_layer(program, spec.is_moe(spec.layers),
                                     _saved_of(program, spec.layers))


def _chunk_activations(program: StageProgram, moved: Mapping[int, float]
                       ) -> tuple[dict[int, float], float]:
    """Bytes each model chunk of the stage keeps per micro-batch (its layers', dense and MoE
    apart; under the block method the layers past the first N keep everything; less what
    ``moved`` puts on the host), and what recomputing one layer needs on top at a time."""
    spec = program.spec
    layer_kind = {i: (_kind(spec, i), _saved_of(program, i)) for i in range(spec.layers)}
    kinds = {kind: layer_activations(program, *kind) for kind in set(layer_kind.values())}

    def kept(i: int, layers: range) -> float:   # an offloaded layer's are on the host at
        per_layer, whole = kinds[layer_kind[i]]   # the peak, the end of the forward
        skipped = spec.recompute_layers and not spec.is_recomputed(i, i - layers.start)
        return 0.0 if i < spec.cpu_offload_layers else whole if skipped else \
            per_layer - moved.get(i, 0.0)

    chunks = {c: sum(kept(i, layers) for i in layers) for c, layers in program.layers.items()}
    if not spec.recompute_layers:
        return chunks, max((kinds[layer_kind[i]][1] for layers in program.layers.values()
                            for i in layers), default=0.0)
    # the block method: a recomputed layer runs again once the layers above it in its chunk
    # are freed, beside its kept input: room beyond the chunk's bytes only where its whole
    # activations exceed what they freed
    transient = 0.0
    for layers in program.layers.values():
        above = 0.0
        for i in reversed(layers):
            if spec.is_recomputed(i, i - layers.start):
                transient = max(transient, kinds[layer_kind[i]][1] - above)
            above += kept(i, layers)
    return chunks, transient


def _module_offloads(program: StageProgram) -> dict[int, float]:
    """Bytes each layer or depth keeps on the host at the peak (``offload_modules``): every
    group of a chunk's forward but its last of each kind (a depth's, on the last stage),
    which stays."""
    spec, moved = program.spec, defaultdict[int, float](float)
    for chunk in program.layers:
        for kind in KINDS:
            calls = [i for i in program.chunk_units(chunk)
                     if offloaded_bytes(spec, program.k, i, kind)]
            for i in calls[:-1]:
                moved[i] += offloaded_bytes(spec, program.k, i, kind)
    return moved


def layer_activation_bytes(program: StageProgram, layer: int) -> float:
    """Bytes layer ``layer`` keeps for its backward per micro-batch (what offloading copies)."""
    return layer_activations(program, _kind(program.spec, layer),
                              _saved_of(program, layer))[0]


def _saved_of(program: StageProgram, layer: int) -> Saved:
    """:func:`saved_inputs` of layer (or depth) ``layer``, in its own precision."""
    return saved_inputs(program.k.of_layer(layer).spec)


def _kind(spec: TransformerSpec, layer: int) -> bool | str:
    """What a layer's activations depend on: whether it is a mixture of experts, or a
    hybrid model's layer's character."""
    return spec.hybrid_pattern[layer] if spec.hybrid_pattern else spec.is_moe(layer)
