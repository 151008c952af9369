"""How the scheduler's steps are timed: one backend per network model.

Both backends take the same routed step templates and answer the same requests; tokens come
back in time order from :meth:`run`.

``AnalyticalTimer``
    Congestion-unaware: a message takes ``path latency + bytes / bottleneck`` whatever else is
    in flight, so a barrier step lasts its slowest message and needs no event engine: one
    numpy expression per (template, size), cached, and a heap of completion times.
``FlowTimer``
    Congestion-aware: the steps' flows go to the :class:`~flowsim.network.engine.FlowEngine`,
    where everything in flight shares links max-min fairly.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from ..network.engine import FlowEngine
from ..topology import Network

_MARKER_PTR = np.zeros(2, np.int64)  # one flow without links: a timer
_NO_LINKS = np.zeros(0, np.int32)


@dataclass
class StepTemplate:
    """Routed messages of one step on every group of a phase (reused across chunks).

    ``dep_indptr`` / ``dep_local`` (``per_npu`` only): for every message, the messages of the
    previous step into its sender, as indices into that step's arrays.
    """

    src: np.ndarray
    dst: np.ndarray
    indptr: np.ndarray
    links: np.ndarray
    npus: np.ndarray
    latency: np.ndarray
    bottleneck: np.ndarray
    link_counts: np.ndarray  # (link ids, multiplicity) of the incidence, for link bytes
    dep_indptr: np.ndarray | None = None
    dep_local: np.ndarray | None = None
    _durations: dict = field(default_factory=dict)

    def duration(self, nbytes: float) -> float:
        """Slowest message of the step when every message runs alone (ns)."""
        d = self._durations.get(nbytes)
        if d is None:
            d = float(np.max(self.latency + nbytes / self.bottleneck)) if self.src.size else 0.0
            self._durations[nbytes] = d
        return d

    def arrivals(self, nbytes: float) -> np.ndarray:
        return self.latency + nbytes / self.bottleneck


def make_template(network: Network, src: np.ndarray, dst: np.ndarray, indptr: np.ndarray,
                  links: np.ndarray) -> StepTemplate:
    """Bundle a routed step with the per-message numbers both backends need."""
    lat = network.path_latency(indptr, links)
    bott = network.path_bottleneck(indptr, links)
    ids, counts = np.unique(links, return_counts=True)
    npus = np.unique(np.concatenate([src, dst]))
    return StepTemplate(src, dst, indptr, links, npus, lat, bott, (ids, counts.astype(float)))


class AnalyticalTimer:
    """Times steps as if every message were alone on the network."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.now = 0.0
        self._heap: list[tuple[float, int, int]] = []
        self._tokens = itertools.count()
        self.link_bytes = np.zeros(network.num_links)
        self.link_busy = np.zeros(network.num_links)
        self.flows = 0
        self.steps = 0

    def _push(self, t: float) -> int:
        token = next(self._tokens)
        heapq.heappush(self._heap, (t, token, token))
        return token

    def _account(self, template: StepTemplate, nbytes: float) -> None:
        ids, counts = template.link_counts
        self.link_bytes[ids] += counts * nbytes
        # busy: each message occupies its links for bytes / bottleneck (no sharing modelled)
        if nbytes > 0:
            per_flow = nbytes / template.bottleneck
            busy = np.repeat(per_flow, np.diff(template.indptr))
            np.add.at(self.link_busy, template.links, busy)
        self.flows += template.src.size
        self.steps += 1

    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        """A barrier step: all messages start at ``release + delay``."""
        self._account(template, nbytes)
        return self._push(release + delay + template.duration(nbytes))

    def timer(self, at: float) -> int:
        return self._push(at)

    def phase_per_npu(self, templates: list[StepTemplate], nbytes: list[float],
                      delays: list[float], release: float) -> int:
        """A whole phase where each message waits only for the messages into its sender."""
        previous_arrival = None
        end = release
        for template, size, delay in zip(templates, nbytes, delays):
            self._account(template, size)
            if previous_arrival is None or template.dep_indptr is None:
                ready = np.full(template.src.size, release)
            else:
                ready = np.full(template.src.size, release)
                counts = np.diff(template.dep_indptr)
                owner = np.repeat(np.arange(template.src.size), counts)
                np.maximum.at(ready, owner, previous_arrival[template.dep_local])
            arrival = ready + delay + template.arrivals(size)
            if arrival.size:
                end = max(end, float(arrival.max()))
            previous_arrival = arrival
        return self._push(end)

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

    def stats(self) -> dict:
        return {"flows": self.flows, "steps": self.steps, "events": self.steps,
                "rate_computations": 0}


class FlowTimer:
    """Times steps on the max-min fair flow engine."""

    def __init__(self, network: Network, model: str = "flow") -> None:
        self.network = network
        self.engine = FlowEngine(network.link_bandwidth, network.link_latency, model)
        self.steps = 0
        self.flows = 0

    @property
    def now(self) -> float:
        return self.engine.now

    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        group = self.engine.new_group()
        self.engine.add(template.indptr, template.links, nbytes, release=release, delay=delay,
                        group=group)
        self.steps += 1
        self.flows += template.src.size
        return group

    def timer(self, at: float) -> int:
        group = self.engine.new_group()
        self.engine.add(_MARKER_PTR, _NO_LINKS, 0.0, release=at, group=group)
        return group

    def phase_per_npu(self, templates: list[StepTemplate], nbytes: list[float],
                      delays: list[float], release: float) -> int:
        first = self.engine.num_flows
        previous = None
        for template, size, delay in zip(templates, nbytes, delays):
            kwargs = {}
            if previous is not None and template.dep_indptr is not None:
                kwargs = {"dep_indptr": template.dep_indptr,
                          "dep_ids": previous + template.dep_local}
            ids = self.engine.add(template.indptr, template.links, size, release=release,
                                  delay=delay, **kwargs)
            previous = ids[0] if ids.size else previous
            self.steps += 1
            self.flows += template.src.size
        everything = np.arange(first, self.engine.num_flows, dtype=np.int64)
        group = self.engine.new_group()
        self.engine.add(_MARKER_PTR, _NO_LINKS, 0.0, release=release,
                        dep_indptr=np.array([0, everything.size], np.int64),
                        dep_ids=everything, group=group)
        return group

    def run(self) -> list[tuple[int, float]]:
        _, groups = self.engine.run()
        return [(int(g), self.engine.group_done_time(int(g))) for g in groups]

    @property
    def link_bytes(self) -> np.ndarray:
        return self.engine.link_bytes()[: self.network.num_links]

    @property
    def link_busy(self) -> np.ndarray:
        return self.engine.link_busy[: self.network.num_links].copy()

    def stats(self) -> dict:
        return {"flows": self.flows, "steps": self.steps, "events": self.engine.events,
                "rate_computations": self.engine.rate_computations}
