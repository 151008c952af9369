"""How the scheduler's steps are timed: one backend per network model.

Both backends take the same routed step templates and answer the same requests; tokens come
back in time order from :meth:`run`.

``AnalyticalTimer``
    Congestion-unaware: a message takes ``path latency + bytes / bottleneck`` whatever else is
    in flight, so a barrier step lasts its slowest message and needs no event engine: one
    numpy expression per (template, size), cached, and a heap of completion times.
``FlowTimer`` (in :mod:`.flow_timer`)
    Congestion-aware: the steps' flows go to the :class:`~flowsim.network.engine.FlowEngine`,
    where everything in flight shares links max-min fairly (steps alone on their links are
    replayed from a solution computed once).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from .._arrays import gather_segments
from ..network._messages import message_loads
from ..topology import Network


@dataclass
class StepTemplate:
    """Routed messages of one step on every group of a phase (reused across chunks).

    Each message travels as one flow, or, on a fabric with ECMP, as several flows that split
    it over equal-cost paths; arrays are per flow.

    Attributes
    ----------
    src, dst, indptr, links : the flows and their paths (CSR).
    weight : fraction of its message's bytes each flow carries (1 on a single path).
    latency : the latency of each flow's message (the longest of its paths), ns.
    per_byte : ns per byte of each flow's message when it is alone on the network (its own
        max-min share: 1 / bottleneck on a single path).
    link_bytes_per_byte : (link ids, bytes carried per byte of message) over the step.
    link_busy_per_byte : (link ids, ns of transmission per byte of message) over the step.
    dep_indptr, dep_local : ``per_npu`` only: for every flow, the flows of the previous step
        into its sender, as indices into that step's arrays.
    """

    src: np.ndarray
    dst: np.ndarray
    indptr: np.ndarray
    links: np.ndarray
    weight: np.ndarray
    latency: np.ndarray
    per_byte: np.ndarray
    link_bytes_per_byte: tuple[np.ndarray, np.ndarray]
    link_busy_per_byte: tuple[np.ndarray, np.ndarray]
    dep_indptr: np.ndarray | None = None
    dep_local: np.ndarray | None = None
    #: groups this template stands for (more than 1 when one group is simulated for all)
    copies: int = 1
    _durations: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    @property
    def single_path(self) -> bool:
        single = self._cache.get("single_path")
        if single is None:
            single = self._cache["single_path"] = bool(np.all(self.weight == 1.0))
        return single

    def engine_paths(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Per-flow path latency and bottleneck for the flow engine (computed once; ``None``
        for multi-path messages, whose numbers here are per message)."""
        cached = self._cache.get("paths")
        if cached is None:
            if self.single_path:
                with np.errstate(divide="ignore"):
                    bottleneck = np.where(self.per_byte > 0, 1.0 / self.per_byte, np.inf)
                cached = (self.latency, bottleneck)
            else:
                cached = (None, None)
            self._cache["paths"] = cached
        return cached

    def duration(self, nbytes: float) -> float:
        """Slowest message of the step when every message runs alone (ns)."""
        d = self._durations.get(nbytes)
        if d is None:
            d = float(np.max(self.arrivals(nbytes))) if self.src.size else 0.0
            self._durations[nbytes] = d
        return d

    def arrivals(self, nbytes: float) -> np.ndarray:
        """Arrival of each flow's message, after its start, when it runs alone (ns)."""
        return self.latency + nbytes * self.per_byte

    def flow_bytes(self, nbytes: float) -> np.ndarray | float:
        """Bytes of each flow for messages of ``nbytes``."""
        return nbytes if self.single_path else nbytes * self.weight


def make_template(network: Network, src: np.ndarray, dst: np.ndarray, indptr: np.ndarray,
                  links: np.ndarray, message: np.ndarray | None = None,
                  weight: np.ndarray | None = None) -> StepTemplate:
    """Bundle a routed step with the per-message numbers both timers need.

    ``message[f]`` is the message flow ``f`` belongs to and ``weight[f]`` its share of the
    bytes (default: one flow per message).
    """
    n = src.size
    lengths = np.diff(indptr)
    path_latency = network.path_latency(indptr, links)
    L = network.num_links
    if message is None:
        weight = np.ones(n)
        bottleneck = network.path_bottleneck(indptr, links)
        per_byte = np.where(np.isfinite(bottleneck), 1.0 / bottleneck, 0.0)
        ids, counts = np.unique(links, return_counts=True)
        busy = np.bincount(links, weights=np.repeat(per_byte, lengths), minlength=L)
        return StepTemplate(src, dst, indptr, links, weight, path_latency, per_byte,
                            (ids, counts.astype(float)),
                            (np.nonzero(busy)[0], busy[busy > 0]))
    n_messages = int(message.max()) + 1 if n else 0
    if np.any(message[1:] < message[:-1]):
        raise ValueError("make_template: flows must be sorted by message")
    latency, message_per_byte, busy = message_loads(
        np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(links, np.int64),
        np.ascontiguousarray(weight, np.float64), np.ascontiguousarray(message, np.int64),
        np.ascontiguousarray(path_latency, np.float64),
        np.ascontiguousarray(network.link_bandwidth, np.float64), n_messages)
    carried = np.bincount(links, weights=np.repeat(weight, lengths), minlength=L)
    return StepTemplate(src, dst, indptr, links, weight, latency[message],
                        message_per_byte[message],
                        (np.nonzero(carried)[0], carried[carried > 0]),
                        (np.nonzero(busy)[0], busy[busy > 0]))


class AnalyticalTimer:
    """Times steps as if every message were alone on the network."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.now = 0.0
        self._heap: list[tuple[float, int, int]] = []
        self._tokens = itertools.count()
        self._link_bytes = np.zeros(network.num_links)
        self._link_busy = np.zeros(network.num_links)
        self._usage: dict[int, list] = {}
        self.flows = 0
        self.steps = 0

    def _push(self, t: float) -> int:
        token = next(self._tokens)
        heapq.heappush(self._heap, (t, token, token))
        return token

    def account(self, template: StepTemplate, nbytes: float, steps: int = 1) -> None:
        """Count ``steps`` steps of ``template`` sending ``nbytes`` per message in all, timed
        elsewhere (a whole phase at once): their flows and link usage."""
        # link bytes and busy time are linear in the bytes of a step: add them up per
        # template and spread them over the links once, at the end
        entry = self._usage.get(id(template))
        if entry is None:
            self._usage[id(template)] = [template, nbytes]
        else:
            entry[1] += nbytes
        self.flows += template.src.size * steps
        self.steps += steps

    def _spread_usage(self) -> None:
        for template, total in self._usage.values():
            ids, per_byte = template.link_bytes_per_byte
            self._link_bytes[ids] += per_byte * total
            # busy: a message occupies its links for as long as it takes alone (no sharing)
            ids, per_byte = template.link_busy_per_byte
            self._link_busy[ids] += per_byte * total
        self._usage.clear()

    @property
    def link_bytes(self) -> np.ndarray:
        self._spread_usage()
        return self._link_bytes

    @property
    def link_busy(self) -> np.ndarray:
        self._spread_usage()
        return self._link_busy

    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        """A barrier step: all messages start at ``release + delay``."""
        self.account(template, nbytes)
        return self._push(release + delay + template.duration(nbytes))

    def timer(self, at: float) -> int:
        return self._push(at)

    def phase(self, dag: PhaseDag, nbytes: list[float], delays: list[float],
              posts: list[float], before: list[np.ndarray], at: float) -> np.ndarray:
        """A phase with per-NPU synchronisation; returns each participant's exit and start
        times.

        ``before`` holds per-NPU exit times (NaN: none) a participant must wait for before it
        starts (its chunk's previous phase, the previous phase in its queue slot).
        """
        start = np.full(dag.npus.size, at)
        for handles in before:
            start = np.fmax(start, handles[dag.npus])
        start_of = np.full(self.network.npus, np.nan)
        start_of[dag.npus] = start
        arrivals = []
        for index, (template, size, delay) in enumerate(zip(dag.templates, nbytes, delays)):
            self.account(template, size)
            ready = start_of[template.src]
            if index > 0 and template.dep_indptr is not None and template.dep_local.size:
                owner = np.repeat(np.arange(template.src.size), np.diff(template.dep_indptr))
                np.maximum.at(ready, owner, arrivals[-1][template.dep_local])
            arrivals.append(ready + delay + template.arrivals(size))
        return dag.exit_times(start, arrivals, posts), start

    def join(self, handles: list[np.ndarray], at: float) -> int:
        """A timer due when every handle (per-NPU exit time, NaN: none) has passed."""
        last = max((float(np.nanmax(h)) for h in handles if np.any(~np.isnan(h))), default=at)
        return self._push(max(at, last))

    def resolve(self, handles: np.ndarray) -> np.ndarray:
        return handles

    def run_all(self) -> None:
        """Nothing to do: analytical phases are timed when they are added."""

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


@dataclass
class PhaseDag:
    """Static structure of a phase run with per-NPU synchronisation.

    Attributes
    ----------
    templates : list of StepTemplate
        The steps, each with ``dep_indptr`` / ``dep_local`` to the previous step.
    npus : ndarray
        Participants, sorted.
    exit_step : ndarray
        Per participant, the last step in which it receives (-1: never).
    exit_indptr, exit_flows : ndarray
        Per participant, the messages of its ``exit_step`` addressed to it (CSR).
    """

    templates: list[StepTemplate]
    npus: np.ndarray
    exit_step: np.ndarray
    exit_indptr: np.ndarray
    exit_flows: np.ndarray
    #: per step: (step, participant positions, flow indices) of the sends of participants
    #: that never receive
    idle_sends: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)

    @classmethod
    def build(cls, templates: list[StepTemplate], participants: np.ndarray) -> PhaseDag:
        npus = np.unique(participants)
        position = np.full(int(npus.max()) + 1 if npus.size else 1, -1, np.int64)
        position[npus] = np.arange(npus.size)
        exit_step = np.full(npus.size, -1, np.int64)
        for index, template in enumerate(templates):
            exit_step[position[template.dst]] = index
        counts = np.zeros(npus.size, np.int64)
        per_step = {}
        for index in np.unique(exit_step[exit_step >= 0]):
            who = np.nonzero(exit_step == index)[0]
            ptr, local = _incoming(templates[index].dst, npus[who])
            per_step[int(index)] = (who, ptr, local)
            counts[who] = np.diff(ptr)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        flows = np.empty(indptr[-1], np.int64)
        for who, ptr, local in per_step.values():
            flows[gather_segments(indptr[who], np.diff(ptr))] = local
        # participants that only send (a broadcast root) leave once their data has arrived
        idle_sends = []
        for index, template in enumerate(templates):
            sender = position[template.src]
            mine = np.nonzero(exit_step[sender] < 0)[0]
            if mine.size:
                idle_sends.append((index, sender[mine], mine))
        return cls(templates, npus, exit_step, indptr, flows, idle_sends)

    def exit_times(self, start: np.ndarray, arrivals: list[np.ndarray],
                   posts: list[float]) -> np.ndarray:
        """Exit time of every participant: its start or its last receptions, plus the delay
        after that step; a participant that never receives leaves one endpoint delay after
        the arrival of what it sent."""
        exit_time = start.copy()
        for index, owner, flows in self.idle_sends:
            np.maximum.at(exit_time, owner, arrivals[index][flows])
        post = np.zeros(self.npus.size)
        for index in np.unique(self.exit_step):
            who = np.nonzero(self.exit_step == index)[0]
            if index < 0:
                post[who] = self.idle_exit_delay
                continue
            counts = self.exit_indptr[who + 1] - self.exit_indptr[who]
            values = arrivals[index][self.exit_flows[gather_segments(self.exit_indptr[who],
                                                                     counts)]]
            owner = np.repeat(who, counts)
            np.maximum.at(exit_time, owner, values)
            post[who] = posts[index]
        return exit_time + post

    def exit_dependencies(self, start_ids: np.ndarray, step_ids: list[np.ndarray],
                          posts: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dependency CSR and delays of the exit markers (flow model): the participant's
        start, and its last receptions (or, if it never receives, its own sends)."""
        owners = [np.arange(self.npus.size)]
        ids = [start_ids]
        delay = np.full(self.npus.size, self.idle_exit_delay)
        for index in np.unique(self.exit_step[self.exit_step >= 0]):
            who = np.nonzero(self.exit_step == index)[0]
            n = self.exit_indptr[who + 1] - self.exit_indptr[who]
            owners.append(np.repeat(who, n))
            ids.append(step_ids[index][self.exit_flows[gather_segments(self.exit_indptr[who],
                                                                       n)]])
            delay[who] = posts[index]
        for index, owner, flows in self.idle_sends:
            owners.append(owner)
            ids.append(step_ids[index][flows])
        owner = np.concatenate(owners)
        order = np.argsort(owner, kind="stable")
        indptr = np.zeros(self.npus.size + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=self.npus.size), out=indptr[1:])
        return indptr, np.concatenate(ids)[order].astype(np.int64), delay

    #: exit delay of a participant that receives nothing (one endpoint delay)
    idle_exit_delay: float = 0.0


def _incoming(previous_dst: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR: for each entry of ``src``, the indices of ``previous_dst`` equal to it."""
    order = np.argsort(previous_dst, kind="stable")
    lo = np.searchsorted(previous_dst[order], src, side="left")
    hi = np.searchsorted(previous_dst[order], src, side="right")
    counts = hi - lo
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, order[gather_segments(lo, counts)].astype(np.int64)
