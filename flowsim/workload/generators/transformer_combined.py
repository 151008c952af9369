"""Megatron-Core's combined 1F1B (``moe_a2a_overlap``, ``--overlap-moe-expert-parallel-comm``;
``megatron/core/pipeline_parallel/combined_1f1b.py``): after one more warm-up forward
(:func:`~.transformer_schedule.warmup_forwards`), every forward runs beside the backward
after it, a layer of each at a time, so that the expert all-to-alls of one pass hide behind
the other's compute."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from .transformer_checks import micro_batches
from .transformer_passes import PassBuilder
from .transformer_schedule import dualpipev, warmup_forwards
from .transformer_spec import TransformerSpec


def paired_forwards(spec: TransformerSpec, stage: int) -> set[int]:
    """Positions in :func:`~.transformer_schedule.stage_schedule` of the forwards run beside
    the backward after them (with ``moe_a2a_overlap``: every forward after the warm-up
    ones; DualPipeV's pairs; else none)."""
    if spec.schedule == "dualpipev":   # DualPipeV's own pairs, with or without it
        return set(dualpipev(spec, stage)[1])
    if not spec.moe_a2a_overlap:
        return set()
    total = micro_batches(spec) * (spec.vpp if spec.schedule == "interleaved" else 1)
    warmup = warmup_forwards(spec, stage)
    return set(range(warmup, 2 * total - warmup, 2))


def beside(b: PassBuilder, row: int, first: Iterator[None], second: Iterator[None]) -> None:
    """Build two passes (each a generator that pauses after every layer) on two chains of
    the compute stream, a layer of each at a time, joined after every pair of layers by an
    empty op (accounted to ``row``), as Megatron-Core steps its combined passes layer by
    layer: within a pair the engine runs whichever op is ready, so one layer computes while
    the other's all-to-alls run."""
    ends: list[int | None] = [b.last, b.last]
    live: list[Iterator[None] | None] = [first, second]
    while all(live):
        for i, passing in enumerate(live):
            b.last = ends[i]
            if passing is not None and next(passing, StopIteration) is StopIteration:
                live[i] = None
            ends[i] = b.last
        b.last = ends[1]
        joined = b.compute("beside.join", (), row, "fwd",
                           (ends[0],) if ends[0] is not None else ())
        ends = [joined, joined]
    for passing in live:   # the longer pass's last layers, alone
        if passing is not None:
            deque(passing, maxlen=0)
