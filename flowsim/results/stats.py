"""What a simulation did, as one typed record (serialised into a Dataset's attributes once,
by :func:`to_attrs`, and read back by :func:`from_attrs`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

_PREFIX = "stats_"


@dataclass(frozen=True)
class SimulationStats:
    """Work done by the network model during one run.

    Attributes
    ----------
    flows : int
        Flows the run stands for (every group of every phase, also those simulated once for
        all their replicas).
    simulated_flows : int
        Flows actually timed.
    steps : int
        Algorithm steps timed.
    events : int
        Event-loop iterations of the flow engine (one per step and phase under the analytical
        model).
    rate_computations : int
        Max-min fair solves (0 under the analytical model).
    reused_steps : int
        Steps and phase steps replayed from a solution computed alone (flow model).
    """

    flows: int = 0
    simulated_flows: int = 0
    steps: int = 0
    events: int = 0
    rate_computations: int = 0
    reused_steps: int = 0

    def with_represented_flows(self, flows: int) -> SimulationStats:
        """The same record counting ``flows`` represented flows."""
        return replace(self, flows=int(flows))

    def as_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in asdict(self).items()}


def to_attrs(stats: SimulationStats) -> dict[str, int]:
    """Dataset attributes (``stats_flows``, ...) holding the record."""
    return {_PREFIX + k: v for k, v in stats.as_dict().items()}


def from_attrs(attrs: Mapping[str, Any]) -> SimulationStats:
    """The record stored in a Dataset's attributes (missing fields are 0)."""
    return SimulationStats(**{f.name: int(attrs.get(_PREFIX + f.name, 0))
                              for f in fields(SimulationStats)})
