"""Zero-bubble weight gradients: a backward that computes only its input gradients, its
weight gradients held in a queue and run later, where the pipeline would otherwise wait
(Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024; DualPipe's ``WeightGradStore``,
deepseek-ai/DualPipe ``dualpipe/utils.py``).

While a deferring backward is built, :class:`~.transformer_passes.PassBuilder` holds its
weight-gradient ops (and what waits for them: gradient buckets, FSDP's reductions) instead of
putting them on the compute stream; :class:`WeightPasses` queues each backward's held work and
puts it on the stream when the schedule runs a weight pass. The input gradient goes to the
previous stage as soon as the data gradients are done, which is the point. Which backwards
defer and where the weight passes run is the schedule's
(:func:`~.transformer_schedule.dualpipev`). Under ``tp_comm_overlap`` nothing is deferred:
Transformer Engine's userbuffers overlap the weight gradients with the data gradients'
collectives, a structure this does not split.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from .transformer_passes import PassBuilder
from .transformer_schedule import dualpipev
from .transformer_spec import TransformerSpec

_NONE: Mapping[int, int] = MappingProxyType({})


class WeightPasses:
    """The deferring backwards of one stage's schedule and its queue of held weight passes."""

    def __init__(self, spec: TransformerSpec, stage: int, b: PassBuilder) -> None:
        self.b = b
        self.deferred: frozenset[int] = frozenset()
        #: position in the schedule -> weight passes run just before it (len: at the end)
        self.before: Mapping[int, int] = _NONE
        if spec.schedule == "dualpipev" and b.ub is None:
            _, _, self.deferred, self.before = dualpipev(spec, stage)
        self.queue: deque[list[Callable[[], object]]] = deque()

    @contextmanager
    def backward(self, position: int) -> Iterator[None]:
        """Build the pass at ``position``, holding its weight gradients if it defers them."""
        if position not in self.deferred:
            yield
            return
        held: list[Callable[[], object]] = []
        self.b.store = held
        try:
            yield
        finally:
            self.b.store = None
        self.queue.append(held)

    def run(self, position: int) -> None:
        """The weight passes due before ``position``, oldest first."""
        for _ in range(self.before.get(position, 0)):
            for action in self.queue.popleft():
                action()
