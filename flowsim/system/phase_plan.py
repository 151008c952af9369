"""A barrier phase sized and ready to be timed at once (instead of step by step)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import cost
from .templates import StepTemplate


@dataclass(eq=False)
class PhasePlan:
    """The steps of one barrier phase with their sizes and the delays between them.

    Attributes
    ----------
    templates : list of StepTemplate
        The routed steps, in order.
    sizes : list of float
        Bytes of every message of each step.
    delays : list of float
        ``delays[i]``: the wait before step ``i`` (see :func:`.cost.step_delays`);
        ``delays[-1]``: the wait after the last.
    step_dim_bytes : list of ndarray
        Bytes each step puts on every dimension (all groups counted).
    """

    templates: list[StepTemplate]
    sizes: list[float]
    delays: list[float]
    step_dim_bytes: list[np.ndarray]
    #: per distinct template: [template, bytes per message over the phase, steps]
    usage: list[list] = field(init=False)
    dim_bytes: np.ndarray | float = field(init=False)
    #: flows of every group the phase stands for
    represented: int = field(init=False)
    links: np.ndarray | None = field(default=None, init=False)
    _durations: list[float] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        usage: dict[int, list] = {}
        for template, size in zip(self.templates, self.sizes):
            entry = usage.setdefault(id(template), [template, 0.0, 0])
            entry[1] += size
            entry[2] += 1
        self.usage = list(usage.values())
        self.dim_bytes = np.sum(self.step_dim_bytes, axis=0) if self.step_dim_bytes else 0.0
        self.represented = sum(tp.represented_flows for tp in self.templates)

    def all_links(self) -> np.ndarray:
        """Every link a step of the phase sends on (computed once, over the distinct
        templates: a 1,024-NPU ring's 1,023 steps share one)."""
        if self.links is None:
            self.links = np.unique(np.concatenate(
                [tp.link_bytes_per_byte[0] for tp, _, _ in self.usage]))
        return self.links

    def end_alone(self, start: float) -> float:
        """When the phase started at ``start`` ends with every message alone on the network
        (:func:`.cost.phase_end`: the same additions, in the same order, as step by step)."""
        if self._durations is None:
            self._durations = [tp.duration(size) for tp, size in zip(self.templates,
                                                                      self.sizes)]
        return cost.phase_end(start, self.delays, self._durations)
