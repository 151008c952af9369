"""The congestion-aware backend: steps timed on the max-min fair flow engine.

Reuse of isolated steps
-----------------------
Max-min fair rates of flows that share no link with anything else in flight do not depend
on the rest of the network: a step whose links are free for as long as it sends evolves
exactly as it would alone. Ring and direct steps repeat thousands of times (every step of a
ring, every chunk, every group of every dimension), so the timer solves a step alone once per
(template, size) and replays the solution: a *virtual* step is one timer instead of its flows
and their events. A whole barrier phase whose links are free is replayed the same way
(:meth:`FlowTimer.replay_phase`).

A virtual step is materialised (its flows put into the engine with the bytes they still have
to send) as soon as anything that could share its links is added before it has finished
sending; a replayed phase is handed back to the scheduler at the step it is in. Deciding that
needs no knowledge of the future: a later step either avoids the claimed links, starts after
the claim ends, or materialises it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._arrays import gather_segments
from ..network import _kernels
from ..network.engine import FlowEngine
from ..topology import Network
from .backends import PhaseDag, StepTemplate
from .phase_plan import PhasePlan

_MARKER_PTR = np.zeros(2, np.int64)  # one flow without links: a timer
_NO_LINKS = np.zeros(0, np.int32)


@dataclass(frozen=True)
class _Alone:
    """A step's solution when it is alone on the network (times relative to its start)."""

    duration: float          # last arrival
    busy_links: np.ndarray   # links the step sends on
    busy_ns: np.ndarray      # how long each of them carries the step
    events: int
    rate_computations: int


@dataclass
class _Virtual:
    """A step replayed from its solution alone (a timer due at its last arrival)."""

    template: StepTemplate
    nbytes: float
    release: float
    delay: float
    alone: _Alone

    @property
    def start(self) -> float:
        return self.release + self.delay

    @property
    def end(self) -> float:
        return self.start + self.alone.duration


@dataclass
class _VirtualPhase:
    """A barrier phase replayed step after step from the steps' solutions alone; ``resume``
    hands it back to the scheduler (index of the first unfinished step, its release)."""

    steps: list[_Virtual]
    start: float
    resume: Callable[[int, float], None]
    links: np.ndarray    # every link of the phase, claimed until ``end``
    end: float           # the last step's last arrival


class FlowTimer:
    """Times steps on the max-min fair flow engine.

    Requests return tokens (increasing in request order). Timers and virtual steps wait in a
    heap here; the engine holds real flows only and is run up to the heap's next time, so a
    network with nothing real in flight costs no kernel call.

    Parameters
    ----------
    network : Network
    model : {"flow", "analytical"}
        The engine's model (the analytical model has its own, faster timer).
    keep_flows : bool
        Keep every flow in the engine (per-flow times for timelines); this also turns off the
        reuse of isolated steps, whose flows never enter the engine.
    """

    #: replay isolated steps from their solution alone (off: every flow enters the engine;
    #: the tests compare the two)
    reuse_isolated_steps = True

    def __init__(self, network: Network, model: str = "flow", *, keep_flows: bool = False
                 ) -> None:
        self.network = network
        self.engine = FlowEngine(network.link_bandwidth, network.link_latency, model,
                                 retire=not keep_flows)
        self.steps = 0
        self.flows = 0
        self.reused_steps = 0
        #: virtual steps put back into the engine: [before they started, while sending]
        self.materialised = [0, 0]
        #: replayed phases handed back to the scheduler
        self.resumed_phases = 0
        self._reuse = self.reuse_isolated_steps and not keep_flows and model == "flow"
        L = network.num_links
        #: real steps in flight per link (counted down when the step has arrived)
        self._outstanding = np.zeros(L, np.int32)
        self._real_links: dict[int, np.ndarray] = {}
        #: per link: the latest time a virtual step or phase claims it until
        self._virtual_until = np.full(L, -np.inf)
        self._virtual: dict[int, _Virtual] = {}
        self._virtual_phases: dict[int, _VirtualPhase] = {}
        self._phase_links: dict[int, np.ndarray] = {}
        self._tokens = itertools.count()
        #: (due time, token) of timers and virtual steps
        self._heap: list[tuple[float, int]] = []
        #: watched engine groups -> their tokens
        self._group_token: dict[int, int] = {}
        #: tokens of materialised virtual steps, whose timers are void
        self._cancelled: set[int] = set()
        # bytes and busy time of what never went through the engine
        self._extra_bytes = np.zeros(L)
        self._extra_busy = np.zeros(L)
        self._extra_events = 0
        self._extra_rates = 0
        self._counted: set[tuple[int, float]] = set()
        self._arrived: dict[tuple[int, float], list] = {}

    @property
    def now(self) -> float:
        return self.engine.now

    # ------------------------------------------------------------------ requests
    def step(self, template: StepTemplate, nbytes: float, release: float, delay: float) -> int:
        """A barrier step: all its messages start at ``release + delay``; returns a token."""
        self._count_steps((template,), 0)
        links = template.link_bytes_per_byte[0]
        start = release + delay
        if template.src.size == 0:   # nothing to send: done when it starts
            return self.timer(start)
        self._materialise_overlapping(links, start)
        free = not self._outstanding[links].any()
        if self._reuse and free:
            return self._add_virtual(template, nbytes, release, delay)
        if start < self.engine.now:
            # a step of a resumed phase, already sending (alone: its phase held the links):
            # it enters the engine with what it has left
            token = self._add_virtual(template, nbytes, release, delay)
            self._materialise(token)
            return token
        token = next(self._tokens)
        self._add_real(template, nbytes, release, delay, token, links)
        return token

    def timer(self, at: float) -> int:
        """A token due at ``at`` (>= now)."""
        token = next(self._tokens)
        heapq.heappush(self._heap, (at, token))
        return token

    def replay_phase(self, plan: PhasePlan, at: float,
                     resume: Callable[[int, float], None]) -> int | None:
        """Replay a whole barrier phase that starts at ``at`` if none of its links carries
        anything; returns a token due when it has ended (after its last delay), or ``None``.

        Should anything need its links before it ends, ``resume(index, release)`` is called
        with the first step not yet finished and the time that step was released: the
        scheduler then runs the rest step by step (the finished steps count as done).
        """
        if not self._reuse:
            return None
        links = self._phase_links.get(id(plan))
        if links is None:
            links = self._phase_links[id(plan)] = np.unique(np.concatenate(
                [tp.link_bytes_per_byte[0] for tp in plan.templates]))
        self._materialise_overlapping(links, at + plan.delays[0])
        if self._outstanding[links].any():
            return None
        steps = []
        end = at
        for template, size, delay in zip(plan.templates, plan.sizes, plan.delays):
            step = _Virtual(template, size, end, delay, self._alone(template, size))
            end = step.end
            steps.append(step)
        token = self.timer(end + plan.delays[-1])
        # conservative: every link of the phase is taken until its last step has arrived
        self._virtual_phases[token] = _VirtualPhase(steps, at, resume, links, end)
        self._virtual_until[links] = np.maximum(self._virtual_until[links], end)
        self._count_steps(plan.templates, len(steps))
        return token

    def phase(self, dag: PhaseDag, nbytes: list[float], delays: list[float],
              posts: list[float], before: list[np.ndarray], at: float) -> np.ndarray:
        """A phase with per-NPU synchronisation as a DAG of flows; returns each participant's
        exit and start markers (zero-byte flows whose arrival is that time).

        ``before`` holds per-NPU marker ids (-1: none) a participant waits for. The DAG's
        flows start at times only the engine knows, so from here on every step is real.
        """
        self._reuse = False
        # handing a phase back may start (and materialise) steps: loop until none is left
        while self._virtual_phases:
            self._materialise_phase(next(iter(self._virtual_phases)))
        for token in [t for t, v in self._virtual.items() if v.template.src.size]:
            if token in self._virtual:
                self._materialise(token)
        engine = self.engine
        deps = np.stack([h[dag.npus] for h in before], axis=1) if before else \
            np.full((dag.npus.size, 0), -1, np.int64)
        valid = deps >= 0
        start_ids = engine.add(np.zeros(dag.npus.size + 1, np.int64), _NO_LINKS, 0.0,
                               release=at, dep_indptr=np.concatenate(
                                   [[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64),
                               dep_ids=deps[valid].astype(np.int64))
        start_of = np.full(self.network.npus, -1, np.int64)
        start_of[dag.npus] = start_ids
        previous = None
        step_ids = []
        for index, (template, size, delay) in enumerate(zip(dag.templates, nbytes, delays)):
            own = start_of[template.src]
            if index > 0 and template.dep_indptr is not None:
                counts = np.diff(template.dep_indptr)
                dep_indptr = np.concatenate([[0], np.cumsum(counts + 1)]).astype(np.int64)
                dep_ids = np.empty(dep_indptr[-1], np.int64)
                dep_ids[dep_indptr[:-1]] = own
                rest = np.ones(dep_ids.size, bool)
                rest[dep_indptr[:-1]] = False
                dep_ids[rest] = previous[template.dep_local]
            else:
                dep_indptr = np.arange(own.size + 1, dtype=np.int64)
                dep_ids = own
            ids = engine.add(template.indptr, template.links, template.flow_bytes(size),
                             release=at, delay=delay, dep_indptr=dep_indptr, dep_ids=dep_ids)
            step_ids.append(ids)
            previous = ids
            self.steps += 1
            self.flows += template.src.size
        # exit markers: after the start and the last step each participant receives in
        ptr, flat_ids, delay = dag.exit_dependencies(start_ids, step_ids, posts)
        exits = engine.add(np.zeros(dag.npus.size + 1, np.int64), _NO_LINKS, 0.0, release=at,
                           delay=delay, dep_indptr=ptr, dep_ids=flat_ids)
        return exits, start_ids

    def join(self, handles: list[np.ndarray], at: float) -> int:
        """A watched marker due when every handle (marker flow id, -1: none) has arrived."""
        ids = np.concatenate([h[h >= 0] for h in handles]) if handles else \
            np.zeros(0, np.int64)
        group = self.engine.new_group()
        self.engine.add(_MARKER_PTR, _NO_LINKS, 0.0, release=at, group=group,
                        dep_indptr=np.array([0, ids.size], np.int64),
                        dep_ids=ids.astype(np.int64))
        token = next(self._tokens)
        self._group_token[group] = token
        return token

    def resolve(self, handles: np.ndarray) -> np.ndarray:
        out = np.full(handles.shape, np.nan)
        ok = handles >= 0
        out[ok] = self.engine.flow_arrays("finish")[handles[ok]]
        return out

    # ------------------------------------------------------------------ running
    def run_all(self) -> None:
        self.engine.run()

    def run(self) -> list[tuple[int, float]]:
        """Advance to the next completions; returns (token, time) pairs in time order."""
        engine = self.engine
        while True:
            heap = self._heap
            while heap and heap[0][1] in self._cancelled:
                self._cancelled.discard(heapq.heappop(heap)[1])
            horizon = heap[0][0] if heap else np.inf
            done = []
            if engine.idle:
                if not heap:
                    return []
                engine.skip_to(horizon)
            else:
                _, groups = engine.run(until=horizon)
                for group in groups.tolist():
                    token = self._group_token.pop(group)
                    links = self._real_links.pop(token, None)
                    if links is not None:
                        self._outstanding[links] -= 1
                    done.append((token, engine.group_done_time(group)))
            now = engine.now
            tol = _kernels.TIME_RTOL * abs(now) + _kernels.TIME_ATOL
            while heap and heap[0][0] <= now + tol:
                t, token = heapq.heappop(heap)
                if token in self._cancelled:
                    self._cancelled.discard(token)
                    continue
                virtual = self._virtual.pop(token, None)
                if virtual is not None:
                    self._account_alone(virtual)
                replayed = self._virtual_phases.pop(token, None)
                if replayed is not None:
                    for step in replayed.steps:
                        self._account_alone(step)
                done.append((token, t))
            if done:
                done.sort(key=lambda pair: (pair[1], pair[0]))
                return done

    # ------------------------------------------------------------------ results
    @property
    def link_bytes(self) -> np.ndarray:
        self._spread_arrived()
        return self.engine.link_bytes()[: self.network.num_links] + self._extra_bytes

    @property
    def link_busy(self) -> np.ndarray:
        self._spread_arrived()
        return self.engine.link_busy[: self.network.num_links] + self._extra_busy

    def stats(self) -> dict:
        return {"flows": self.flows, "steps": self.steps,
                "events": self.engine.events + self._extra_events,
                "rate_computations": self.engine.rate_computations + self._extra_rates,
                "reused_steps": self.reused_steps}

    # ------------------------------------------------------------------ isolated steps
    def _add_real(self, template: StepTemplate, nbytes: float, release: float, delay: float,
                  token: int, links: np.ndarray) -> int:
        """The step's flows into the engine, in a new watched group that stands for
        ``token``; returns the group."""
        group = self.engine.new_group()
        self._group_token[group] = token
        latency, bottleneck = template.engine_paths()
        self.engine.add(template.indptr, template.links, template.flow_bytes(nbytes),
                        release=release, delay=delay, group=group, path_latency=latency,
                        path_bottleneck=bottleneck)
        self._outstanding[links] += 1
        self._real_links[token] = links
        return group

    def _add_virtual(self, template: StepTemplate, nbytes: float, release: float,
                     delay: float) -> int:
        alone = self._alone(template, nbytes)
        virtual = _Virtual(template, nbytes, release, delay, alone)
        token = self.timer(virtual.end)
        self._virtual[token] = virtual
        ids = alone.busy_links
        self._virtual_until[ids] = np.maximum(self._virtual_until[ids],
                                              virtual.start + alone.busy_ns)
        self.reused_steps += 1
        return token

    def _alone(self, template: StepTemplate, nbytes: float) -> _Alone:
        """The step's solution alone on the network (solved once per template and size)."""
        solved = template._cache.setdefault("alone", {})
        alone = solved.get(nbytes)
        if alone is None:
            engine = self._run_alone(template, nbytes)
            finish = engine.flow_arrays("finish")
            busy = engine.link_busy[: self.network.num_links]
            ids = np.nonzero(busy > 0)[0]
            alone = _Alone(float(finish.max()) if finish.size else 0.0, ids, busy[ids],
                           engine.events, engine.rate_computations)
            solved[nbytes] = alone
        if (id(template), nbytes) not in self._counted:   # the solve's work, once per run
            self._counted.add((id(template), nbytes))
            self._extra_events += alone.events
            self._extra_rates += alone.rate_computations
        return alone

    def _run_alone(self, template: StepTemplate, nbytes: float,
                   until: float | None = None) -> FlowEngine:
        """A fresh engine holding only this step, started at 0 and run to the end (or until
        ``until``, when it stops with the step's state at that time)."""
        engine = FlowEngine(self.network.link_bandwidth, self.network.link_latency, "flow")
        latency, bottleneck = template.engine_paths()
        engine.add(template.indptr, template.links, template.flow_bytes(nbytes), release=0.0,
                   path_latency=latency, path_bottleneck=bottleneck)
        if until is not None:
            group = engine.new_group()
            engine.add(_MARKER_PTR, _NO_LINKS, 0.0, release=until, group=group)
        engine.run()
        return engine

    def _account_alone(self, virtual: _Virtual) -> None:
        """A virtual step has arrived: its bytes and busy time join the links' totals (counted
        per template and size, spread over the links when asked for)."""
        key = (id(virtual.template), virtual.nbytes)
        entry = self._arrived.get(key)
        if entry is None:
            self._arrived[key] = [virtual, 1]
        else:
            entry[1] += 1

    def _spread_arrived(self) -> None:
        for virtual, count in self._arrived.values():
            ids, per_byte = virtual.template.link_bytes_per_byte
            self._extra_bytes[ids] += per_byte * (virtual.nbytes * count)
            self._extra_busy[virtual.alone.busy_links] += virtual.alone.busy_ns * count
        self._arrived.clear()

    def _count_steps(self, templates, reused: int) -> None:
        self.steps += len(templates)
        self.flows += sum(tp.src.size for tp in templates)
        self.reused_steps += reused

    def _materialise_overlapping(self, links: np.ndarray, start: float) -> None:
        """Materialise the virtual steps and phases still using ``links`` at ``start``
        (a resumed phase may start a virtual step there: look again until none is left).

        ``_virtual_until`` holds, per link, the latest claim on it; only when that lies
        beyond ``start`` are the live claims checked one by one (a link may carry several
        claims, one after the other)."""
        tol = _kernels.TIME_RTOL * abs(start) + _kernels.TIME_ATOL
        while self._virtual or self._virtual_phases:
            if not (self._virtual_until[links] > start + tol).any():
                return
            asked = np.zeros(self._virtual_until.size, bool)
            asked[links] = True
            hits = []
            for token, step in self._virtual.items():
                ids = step.alone.busy_links
                mine = asked[ids]
                if mine.any() and (step.start + step.alone.busy_ns[mine] > start + tol).any():
                    hits.append(token)
            for token, replayed in self._virtual_phases.items():
                if replayed.end > start + tol and asked[replayed.links].any():
                    hits.append(token)
            if not hits:
                return
            for token in hits:
                if token in self._virtual_phases:
                    self._materialise_phase(token)
                elif token in self._virtual:
                    self._materialise(token)

    def _materialise_phase(self, token: int) -> None:
        """Hand a replayed phase back to the scheduler at the step it is in now."""
        replayed = self._virtual_phases.pop(token)
        self._cancelled.add(token)
        self.resumed_phases += 1
        now = self.engine.now
        index, release = 0, replayed.start
        for step in replayed.steps:
            if step.end > now:
                break
            self._account_alone(step)
            index, release = index + 1, step.end
        rest = [step.template for step in replayed.steps[index:]]
        # the unfinished steps are counted again when the scheduler re-issues them
        self.steps -= len(rest)
        self.flows -= sum(tp.src.size for tp in rest)
        self.reused_steps -= len(rest)
        replayed.resume(index, release)

    def _materialise(self, token: int) -> None:
        """Put a virtual step's flows into the engine as they are now (its timer is void;
        the new flows' group stands for its token)."""
        virtual = self._virtual.pop(token)
        template = virtual.template
        engine = self.engine
        now = engine.now
        links = template.link_bytes_per_byte[0]
        self._cancelled.add(token)
        self.materialised[virtual.start < now] += 1
        if virtual.start >= now:
            self._add_real(template, virtual.nbytes, virtual.release, virtual.delay, token,
                           links)
            return
        group = engine.new_group()
        self._group_token[group] = token
        # the step alone up to now: what each flow still has to send, or when it arrives
        alone = self._run_alone(template, virtual.nbytes, until=now - virtual.start)
        n = template.src.size
        state = alone.flow_arrays("state")[:n]
        remaining = alone.flow_arrays("remaining")[:n]
        sending = np.nonzero(state == _kernels.SENDING)[0]
        flying = np.nonzero(state == _kernels.IN_FLIGHT)[0]
        arrival = virtual.start + alone.flow_arrays("send_end")[flying] + \
            alone.flow_arrays("latency")[flying]
        counts = np.diff(template.indptr)[sending]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        latency, bottleneck = template.engine_paths()
        if sending.size:
            engine.add(indptr, template.links[gather_segments(template.indptr[sending], counts)],
                       remaining[sending], release=now, group=group,
                       path_latency=None if latency is None else latency[sending],
                       path_bottleneck=None if bottleneck is None else bottleneck[sending])
        if flying.size or not sending.size:
            at = arrival if flying.size else np.array([max(now, virtual.start +
                                                           virtual.alone.duration)])
            engine.add(np.zeros(at.size + 1, np.int64), _NO_LINKS, 0.0, release=at,
                       group=group)
        # what was sent before now never enters the engine
        sent = np.asarray(template.flow_bytes(virtual.nbytes), np.float64) * np.ones(n)
        sent[sending] -= remaining[sending]
        self._extra_bytes += np.bincount(template.links,
                                         weights=np.repeat(sent, np.diff(template.indptr)),
                                         minlength=self._extra_bytes.size)
        self._extra_busy += alone.link_busy[: self.network.num_links]
        self._extra_events += alone.events
        self._extra_rates += alone.rate_computations
        self._outstanding[links] += 1
        self._real_links[token] = links
