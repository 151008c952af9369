"""A barrier phase sized and ready to be timed at once (instead of step by step)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .backends import StepTemplate


@dataclass
class PhasePlan:
    """The steps of one barrier phase with their sizes and the delays between them.

    Attributes
    ----------
    templates : list of StepTemplate
        The routed steps, in order.
    sizes : list of float
        Bytes of every message of each step.
    delays : list of float
        ``delays[i]``: the wait before step ``i`` (the endpoint delay, then each previous
        step's endpoint delay plus local reduction); ``delays[-1]``: the wait after the last.
    step_dim_bytes : list of ndarray
        Bytes each step puts on every dimension (all groups counted).
    """

    templates: list[StepTemplate]
    sizes: list[float]
    delays: list[float]
    step_dim_bytes: list[np.ndarray]
    #: per distinct template: [template, bytes per message over the phase, steps]
    usage: list[list] = field(init=False)
    dim_bytes: np.ndarray = field(init=False)
    #: flows of every group the phase stands for
    represented: int = field(init=False)
    _timed: list[tuple[float, float]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        usage: dict[int, list] = {}
        for template, size in zip(self.templates, self.sizes):
            entry = usage.setdefault(id(template), [template, 0.0, 0])
            entry[1] += size
            entry[2] += 1
        self.usage = list(usage.values())
        self.dim_bytes = np.sum(self.step_dim_bytes, axis=0) if self.step_dim_bytes else 0.0
        self.represented = sum(tp.src.size * tp.copies for tp in self.templates)

    def analytical_end(self, start: float) -> float:
        """When the phase started at ``start`` ends with every message alone on the network:
        the same additions, in the same order, as timing it step by step."""
        if self._timed is None:
            self._timed = [(delay, template.duration(size)) for delay, template, size
                           in zip(self.delays, self.templates, self.sizes)]
        end = start
        for delay, duration in self._timed:
            end = end + delay + duration
        return end + self.delays[-1]
