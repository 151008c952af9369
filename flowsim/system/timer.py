"""The contract between the scheduler and a network model: a :class:`Timer`.

The scheduler decides *what* is sent and *when it may start*; a timer decides *how long it
takes*. Every request returns a token (an int, increasing in request order); :meth:`Timer.run`
hands back the tokens that are due, in time order. Per-NPU (DAG) phases return *handles*
instead, one per NPU, that later requests can wait on and :meth:`Timer.resolve` turns into
times once the run is over.

Two timers implement it, one per network model (:data:`TIMERS`):

``analytical``
    :class:`~.analytical_timer.AnalyticalTimer`: every message alone on the network, priced
    by :mod:`.cost` (ASTRA-sim's congestion-unaware backend).
``flow``
    :class:`~.flow_timer.FlowTimer`: the flows of everything in flight share links max-min
    fairly on the :class:`~flowsim.network.engine.FlowEngine`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from ..results.stats import SimulationStats
    from .dag import PhaseDag
    from .phase_plan import PhasePlan
    from .templates import StepTemplate


class Timer(Protocol):
    """What a network model offers the scheduler (both timers implement all of it)."""

    #: price messages of flat (``one*``) phases by the lowest dimension they cross only
    prices_flat_by_lowest_dim: bool

    @property
    def now(self) -> float:
        """The time of the last batch of tokens handed back by :meth:`run` (ns)."""

    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        """A barrier step: every message of ``template`` (``nbytes`` each) starts at
        ``release + delay``; the token is due when the last has arrived."""

    def timer(self, at: float) -> int:
        """A token due at ``at`` (>= now)."""

    def whole_phase(self, plan: PhasePlan, at: float,
                    resume: Callable[[int, float], None]) -> int | None:
        """Time a whole barrier phase starting at ``at`` at once; the token is due after its
        last delay. ``None``: the phase must run step by step. A timer may later call
        ``resume(index, release)`` to hand the phase back from step ``index`` (released at
        ``release``); the steps before it count as done."""

    def dag_phase(self, dag: PhaseDag, nbytes: list[float], delays: list[float],
                  posts: list[float], before: list[np.ndarray], at: float
                  ) -> tuple[np.ndarray, np.ndarray]:
        """A per-NPU phase: its participants start after ``at`` and after the handles in
        ``before``; returns their exit and start handles."""

    def no_handles(self, n: int) -> np.ndarray:
        """``n`` handles that mean "nothing to wait for"."""

    def join(self, handles: list[np.ndarray], at: float) -> int:
        """A token due when every handle has passed (and not before ``at``)."""

    def resolve(self, handles: np.ndarray) -> np.ndarray:
        """Times of handles once the run is over (NaN: none)."""

    def run(self) -> list[tuple[int, float]]:
        """Advance to the next due tokens; ``[]`` when nothing is pending."""

    def run_all(self) -> None:
        """Finish everything in flight that no token waits for (per-NPU phases)."""

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried per link so far."""

    @property
    def link_busy(self) -> np.ndarray:
        """Time each link carried at least one sending message (ns)."""

    def message_times(self, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start, last byte sent and arrival of each message of a step (timers made with
        ``keep_flows=True``)."""

    def stats(self) -> SimulationStats:
        """Work done so far."""




def make_timer(model: str, network, *, replay: bool = True, keep_flows: bool = False
               ) -> Timer:
    """The timer of a network model.

    Parameters
    ----------
    model : {"analytical", "flow"}
    network : Network or FabricNetwork
    replay : bool
        Flow model: replay steps and phases whose links are free from their solution alone
        (exact; ``False`` puts every flow into the engine, for checks).
    keep_flows : bool
        Keep per-message times for timelines (turns replay off).
    """
    if model == "analytical":
        from .analytical_timer import AnalyticalTimer

        return AnalyticalTimer(network, keep_flows=keep_flows)
    from .flow_timer import FlowTimer

    return FlowTimer(network, replay=replay, keep_flows=keep_flows)
