"""The congestion-unaware timer: every message alone on the network (ASTRA-sim's analytical
backend). Steps are priced with :mod:`.cost`; no event engine is needed, only a heap of
completion times. Implements :class:`~flowsim.system.timer.Timer`."""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from ..results.stats import SimulationStats
from .dag import PhaseDag
from .phase_plan import PhasePlan
from .templates import StepTemplate


class AnalyticalTimer:
    """Times steps as if every message were alone on the network.

    Parameters
    ----------
    network : Network or FabricNetwork
    keep_flows : bool
        Remember every step's start so that :meth:`message_times` can report its messages
        (timelines).
    """

    #: ASTRA-sim's analytical backend charges a message only for the lowest dimension it
    #: crosses; that matters only for flat (``one*``) algorithms, whose messages cross several
    prices_flat_by_lowest_dim = True

    def __init__(self, network, *, keep_flows: bool = False) -> None:
        self.network = network
        self.now = 0.0
        self._heap: list[tuple[float, int, int]] = []
        self._tokens = itertools.count()
        self._link_bytes = np.zeros(network.num_links)
        self._link_busy = np.zeros(network.num_links)
        self._usage: dict[int, list] = {}
        self._steps_by_token: dict[int, tuple[StepTemplate, float, float]] | None = \
            {} if keep_flows else None
        #: flows timed, and flows they stand for (each group a replicated one stands for)
        self.flows = self.represented_flows = 0
        self.steps = 0

    # ------------------------------------------------------------------ requests
    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        """A barrier step: all messages start at ``release + delay``."""
        self._account(template, nbytes)
        start = release + delay
        token = self._push(start + template.duration(nbytes))
        if self._steps_by_token is not None:
            self._steps_by_token[token] = (template, nbytes, start)
        return token

    def timer(self, at: float) -> int:
        return self._push(at)

    def whole_phase(self, plan: PhasePlan, at: float, resume) -> int:
        """A barrier phase's steps never wait for anything but each other, so its end is known
        when it starts: one timer instead of an event per step (``resume`` is never called)."""
        for template, size, count in plan.usage:
            self._account(template, size, count)
        return self._push(plan.end_alone(at))

    def dag_phase(self, dag: PhaseDag, nbytes: list[float], delays: list[float],
                  posts: list[float], before: list[np.ndarray], at: float
                  ) -> tuple[np.ndarray, np.ndarray]:
        """A phase with per-NPU synchronisation; returns each participant's exit and start
        times (the handles of this timer are times; NaN: none).

        ``before`` holds per-NPU handles a participant must wait for before it starts (its
        chunk's previous phase, the previous phase in its queue slot).
        """
        start = np.full(dag.npus.size, at)
        for handles in before:
            start = np.fmax(start, handles[dag.npus])
        start_of = np.full(self.network.npus, np.nan)
        start_of[dag.npus] = start
        arrivals: list[np.ndarray] = []
        for index, (template, size, delay) in enumerate(zip(dag.templates, nbytes, delays)):
            self._account(template, size)
            ready = start_of[template.src]
            if index > 0 and template.dep_indptr is not None and template.dep_local is not None \
                    and template.dep_local.size:
                owner = np.repeat(np.arange(template.src.size), np.diff(template.dep_indptr))
                np.maximum.at(ready, owner, arrivals[-1][template.dep_local])
            arrivals.append(ready + delay + template.arrivals(size))
        return dag.exit_times(start, arrivals, posts), start

    def no_handles(self, n: int) -> np.ndarray:
        """Per-NPU handles meaning "nothing to wait for"."""
        return np.full(n, np.nan)

    def join(self, handles: list[np.ndarray], at: float) -> int:
        """A token due when every handle has passed."""
        last = max((float(np.nanmax(h)) for h in handles if np.any(~np.isnan(h))), default=at)
        return self._push(max(at, last))

    def resolve(self, handles: np.ndarray) -> np.ndarray:
        """Times of handles (NaN: none)."""
        return handles

    # ------------------------------------------------------------------ running
    def run(self) -> list[tuple[int, float]]:
        """Pop every token due at the earliest pending time."""
        if not self._heap:
            return []
        t = self._heap[0][0]
        done = []
        while self._heap and self._heap[0][0] <= t:
            t_i, _, token = heapq.heappop(self._heap)
            done.append((token, t_i))
        self.now = t
        return done

    def run_all(self) -> None:
        """Nothing to do: per-NPU phases are timed when they are added."""

    # ------------------------------------------------------------------ results
    @property
    def link_bytes(self) -> np.ndarray:
        self._spread_usage()
        return self.network.spread_links(self._link_bytes, self._link_busy)[0]

    @property
    def link_busy(self) -> np.ndarray:
        self._spread_usage()
        return self.network.spread_links(self._link_bytes, self._link_busy)[1]

    def message_times(self, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start, last byte sent and arrival of every message of a step (``keep_flows``)."""
        assert self._steps_by_token is not None, "message times need keep_flows=True"
        template, nbytes, start_ns = self._steps_by_token[token]
        start = np.full(template.src.size, start_ns)
        transfer = nbytes * template.per_byte
        return start, start + transfer, start + transfer + template.latency

    def stats(self) -> SimulationStats:
        return SimulationStats(flows=self.represented_flows, simulated_flows=self.flows,
                               steps=self.steps, events=self.steps, rate_computations=0,
                               reused_steps=0)

    # ------------------------------------------------------------------ internals
    def _push(self, t: float) -> int:
        token = next(self._tokens)
        heapq.heappush(self._heap, (t, token, token))
        return token

    def _account(self, template: StepTemplate, nbytes: float, steps: int = 1) -> None:
        """Count ``steps`` steps of ``template`` sending ``nbytes`` per message in all."""
        # link bytes and busy time are linear in the bytes of a step: add them up per
        # template and spread them over the links once, at the end
        entry = self._usage.get(id(template))
        if entry is None:
            self._usage[id(template)] = [template, nbytes]
        else:
            entry[1] += nbytes
        self.flows += template.flows * steps
        self.represented_flows += template.represented_flows * steps
        self.steps += steps

    def _spread_usage(self) -> None:
        for template, total in self._usage.values():
            ids, per_byte = template.link_bytes_per_byte
            self._link_bytes[ids] += per_byte * total
            # busy: a message occupies its links for as long as it takes alone (no sharing)
            ids, per_byte = template.link_busy_per_byte
            self._link_busy[ids] += per_byte * total
        self._usage.clear()
