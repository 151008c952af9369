"""Megatron-Core's data-parallel buckets, and the distributed optimizer's parameter all-gathers
over them (the gradient reductions over the same buckets, and their alignment over the
pipeline, are the stage program's: :mod:`.transformer_program`).

Gradients are bucketed from the end of the model: walking a stage's parameters in backward
order, a bucket closes once it holds at least the bucket size (the last may hold less). The
updated 16-bit parameters are all-gathered over the same buckets, in forward order. With
``overlap_param_gather`` the gathers form a chain (Megatron-Core's ``finish_param_sync``, r0.8
to today): the first bucket's gather starts with the iteration; the forward pre-hook of the
first layer that uses a bucket waits for its gather and only then dispatches the next bucket's,
so one gather is in flight at a time, each overlapping the forward of the bucket before it.
(That is core_r0.8's dispatch, one chain over the model chunks starting in ``zero_grad``;
today's Megatron-Core chains each model chunk on its own and dispatches a chain's first
bucket at its first use, which on a later pipeline stage exposes that one bucket's gather
after the first receive instead of hiding it in the warm-up: a bucket per stage, left out.)
With the interleaved schedule Megatron-Core (from core_r0.9, ``align_param_gather``) instead
starts all of a model chunk's gathers together: chunks 0 and 1 with the iteration, chunk
``j`` at the forward whose virtual micro-batch, shifted by the pipeline rank, is the first of
chunk ``j - 1`` (so every pipeline rank starts them at about the same time). Without the
overlap every bucket is gathered after the optimizer step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .transformer_passes import Frontier, PassBuilder

#: a unit of parameters: a transformer layer's index, ``"embedding"`` or ``"logits"`` (not
#: :data:`.transformer_schedule.Unit`, a pass of the schedule)
ParamUnit = int | str


def partition(sizes: Iterable[float], limit: float) -> list[list[int]]:
    """Indices of ``sizes`` (in backward order) grouped into buckets of at least ``limit``,
    the last one holding what is left; zero sizes join no bucket."""
    buckets: list[list[int]] = []
    current: list[int] = []
    pending = 0.0
    for i, size in enumerate(sizes):
        if not size:
            continue
        current.append(i)
        pending += size
        if pending >= limit:
            buckets.append(current)
            current, pending = [], 0.0
    if current:
        buckets.append(current)
    return buckets


@dataclass(frozen=True)
class GatherBucket:
    """One bucket's parameter all-gather: the unit whose forward first needs it, the bytes
    gathered (every rank's shard is its input) and the model chunk it belongs to (bucket
    numbers in op names run on across a stage's chunks)."""

    first: ParamUnit
    nbytes: float
    chunk: int


@dataclass(frozen=True)
class GatherGroup:
    """A group's buckets in forward order over the stage's chunks, and its ranks."""

    name: str
    dims: tuple[int, ...]
    ranks: int
    buckets: tuple[GatherBucket, ...]


class ParameterGathers:
    """A stage's parameter all-gathers, one sequence of buckets per group (dense, expert):
    chained (one in flight), aligned (a chunk's together) or after the optimizer step; see
    the module docstring. ``row`` is the per-layer breakdown's row they count in."""

    def __init__(self, b: PassBuilder, groups: list[GatherGroup], row: int, *,
                 aligned: bool) -> None:
        self.b, self.groups, self.row, self.aligned = b, groups, row, aligned
        self.ops: dict[tuple[int, int], int] = {}    # (group, bucket) -> its all-gather
        self.overlapped = False
        self.waits: dict[ParamUnit, list[tuple[int, int]]] = {}
        for g, group in enumerate(groups):
            for k, bucket in enumerate(group.buckets):
                self.waits.setdefault(bucket.first, []).append((g, k))

    def _gather(self, g: int, k: int, deps: Frontier) -> None:
        group = self.groups[g]
        if k < len(group.buckets):
            self.ops[g, k] = self.b.collective(
                f"chunk{group.buckets[k].chunk}.{group.name}.bucket{k}.all_gather", "all_gather",
                int(group.buckets[k].nbytes / group.ranks), group.dims, self.row, "fwd", deps)

    def start(self) -> None:
        """Dispatch the gathers that start with the iteration (overlapped): each chain's
        first one, or (aligned) those of the first two chunks."""
        self.overlapped = True
        if self.aligned:
            for chunk in (0, 1):
                self.gather_chunk(chunk, ())
            return
        for g in range(len(self.groups)):
            self._gather(g, 0, ())

    def gather_chunk(self, chunk: int, deps: Frontier) -> None:
        """Dispatch every gather of a model chunk (aligned)."""
        for g, group in enumerate(self.groups):
            for k, bucket in enumerate(group.buckets):
                if bucket.chunk == chunk:
                    self._gather(g, k, deps)

    def all_after(self, step: int) -> None:
        """Dispatch every gather after the optimizer step (not overlapped)."""
        for g, group in enumerate(self.groups):
            for k in range(len(group.buckets)):
                self._gather(g, k, (step,))

    def reach(self, unit: ParamUnit, x: Frontier) -> Frontier:
        """The forward reaching ``unit`` for the first time, after :meth:`start`: wait for
        the gathers of the buckets it is the first user of, then (chained) dispatch each
        chain's next one (the data ``x`` the forward waits for, with those gathers)."""
        if not self.overlapped:
            return x
        for g, k in self.waits.pop(unit, ()):
            x = (*x, self.ops[g, k])
            if not self.aligned:
                self._gather(g, k + 1, x)
        return x
