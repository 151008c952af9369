"""The congestion-aware timer: steps timed on the max-min fair flow engine. Implements
:class:`~flowsim.system.timer.Timer`.

Steps and phases whose links are free are replayed from their solution alone (see
:mod:`.replay`); everything else puts its flows into the :class:`~flowsim.network.engine.
FlowEngine`, where everything in flight shares links max-min fairly."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import numpy as np

from ..network import _kernels
from ..network.engine import FlowEngine
from ..results.stats import SimulationStats
from .dag import PhaseDag, add_dag_flows
from .phase_plan import PhasePlan
from .replay import (
    MARKER_PTR,
    NO_LINKS,
    Alone,
    VirtualPhase,
    VirtualStep,
    add_remainder,
    overlapping_claims,
    remainder,
    solve_alone,
)
from .templates import StepTemplate, flow_counts


class FlowTimer:
    """Times steps on the max-min fair flow engine.

    Requests return tokens (increasing in request order). Timers and virtual steps wait in a
    heap here; the engine holds real flows only and is run up to the heap's next time, so a
    network with nothing real in flight costs no kernel call.

    Parameters
    ----------
    network : Network or FabricNetwork
    replay : bool
        Replay steps and phases whose links are free from their solution alone (exact; off:
        every flow enters the engine, for checks).
    keep_flows : bool
        Keep every flow in the engine (per-message times for timelines); turns replay off.
    """

    prices_flat_by_lowest_dim = False

    def __init__(self, network, *, replay: bool = True, keep_flows: bool = False) -> None:
        self.network = network
        self.engine = FlowEngine(network.engine_capacity, network.link_latency, "flow",
                                 retire=not keep_flows)
        #: steps, flows timed, flows they stand for (a quotient's orbits), replayed steps
        self.steps = self.flows = self.represented_flows = self.reused_steps = 0
        #: virtual steps put back into the engine: [before they started, while sending]
        self.materialised = [0, 0]
        #: replayed phases handed back to the scheduler
        self.resumed_phases = 0
        self._replay = replay and not keep_flows
        self._first_flow: dict[int, tuple[int, int]] | None = {} if keep_flows else None
        L = network.num_links
        #: real steps in flight per link (counted down when the step has arrived)
        self._outstanding = np.zeros(L, np.int32)
        self._real_links: dict[int, np.ndarray] = {}
        #: per link: the latest time a virtual step or phase claims it until
        self._virtual_until = np.full(L, -np.inf)
        self._virtual: dict[int, VirtualStep] = {}
        self._virtual_phases: dict[int, VirtualPhase] = {}
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
        self._extra_events = self._extra_rates = 0
        self._alone: dict[tuple[int, float], Alone] = {}
        #: per phase plan (by id): its steps' solutions alone, and its flows
        self._phase_alone: dict[int, tuple[list[Alone], tuple[int, int]]] = {}
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
        if self._replay and free:
            return self._add_virtual(template, nbytes, release, delay)
        if start < self.engine.now:
            # a step of a resumed phase, already sending (alone: its phase held the links):
            # it enters the engine with what it has left
            token = self._add_virtual(template, nbytes, release, delay)
            self._materialise(token)
            return token
        token = next(self._tokens)
        if self._first_flow is not None:
            self._first_flow[token] = (self.engine.num_flows, template.src.size)
        self._add_real(template, nbytes, release, delay, token, links)
        return token

    def timer(self, at: float) -> int:
        """A token due at ``at`` (>= now)."""
        token = next(self._tokens)
        heapq.heappush(self._heap, (at, token))
        return token

    def whole_phase(self, plan: PhasePlan, at: float,
                    resume: Callable[[int, float], None]) -> int | None:
        """Replay a whole barrier phase that starts at ``at`` if none of its links carries
        anything; returns a token due when it has ended (after its last delay), or ``None``.

        Should anything need its links before it ends, ``resume(index, release)`` is called
        with the first step not yet finished and the time that step was released: the
        scheduler then runs the rest step by step (the finished steps count as done).
        """
        if not self._replay:
            return None
        links = plan.all_links()
        self._materialise_overlapping(links, at + plan.delays[0])
        if self._outstanding[links].any():
            return None
        solved = self._phase_alone.get(id(plan))   # the plans live as long as this timer
        if solved is None:
            solved = self._phase_alone[id(plan)] = (
                [self._solve(tp, size) for tp, size in zip(plan.templates, plan.sizes)],
                flow_counts(plan.templates))
        steps, end = [], at
        for template, size, delay, alone in zip(plan.templates, plan.sizes, plan.delays,
                                                solved[0]):
            steps.append(VirtualStep(template, size, end, delay, alone))
            end = (end + delay) + alone.duration   # VirtualStep.end, without two calls
        token = self.timer(end + plan.delays[-1])
        # conservative: every link of the phase is taken until its last step has arrived
        self._virtual_phases[token] = VirtualPhase(steps, at, resume, links, end)
        self._virtual_until[links] = np.maximum(self._virtual_until[links], end)
        self._count_steps(plan.templates, len(steps), solved[1])
        return token

    def dag_phase(self, dag: PhaseDag, nbytes: list[float], delays: list[float],
                  posts: list[float], before: list[np.ndarray], at: float
                  ) -> tuple[np.ndarray, np.ndarray]:
        """A phase with per-NPU synchronisation as a DAG of flows; returns each participant's
        exit and start markers (zero-byte flows whose arrival is that time).

        ``before`` holds per-NPU marker ids (-1: none) a participant waits for. The DAG's
        flows start at times only the engine knows, so from here on every step is real.
        """
        self._replay = False
        # handing a phase back may start (and materialise) steps: loop until none is left
        while self._virtual_phases:
            self._materialise_phase(next(iter(self._virtual_phases)))
        for token in [t for t, v in self._virtual.items() if v.template.src.size]:
            if token in self._virtual:
                self._materialise(token)
        exits, starts, flows = add_dag_flows(self.engine, self.network.npus, dag, nbytes,
                                             delays, posts, before, at)
        self._count_steps(dag.templates, 0, (flows, flows))
        return exits, starts

    def no_handles(self, n: int) -> np.ndarray:
        """Per-NPU marker ids meaning "nothing to wait for"."""
        return np.full(n, -1, np.int64)

    def join(self, handles: list[np.ndarray], at: float) -> int:
        """A watched marker due when every handle (marker flow id, -1: none) has arrived."""
        ids = np.concatenate([h[h >= 0] for h in handles]) if handles else \
            np.zeros(0, np.int64)
        group = self.engine.new_group()
        self.engine.add(MARKER_PTR, NO_LINKS, 0.0, release=at, group=group,
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
        return self._spread_links()[0]

    @property
    def link_busy(self) -> np.ndarray:
        return self._spread_links()[1]

    def _spread_links(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and busy time of every network link (twin groups shared back)."""
        self._spread_arrived()
        L = self.network.num_links
        return self.network.spread_links(self.engine.link_bytes()[:L] + self._extra_bytes,
                                         self.engine.link_busy[:L] + self._extra_busy)

    def message_times(self, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start, last byte sent and arrival of every flow of a step (``keep_flows``)."""
        assert self._first_flow is not None, "message times need keep_flows=True"
        first, count = self._first_flow[token]
        ids = slice(first, first + count)
        engine = self.engine
        return (engine.flow_arrays("start")[ids], engine.flow_arrays("send_end")[ids],
                engine.flow_arrays("finish")[ids])

    def stats(self) -> SimulationStats:
        return SimulationStats(flows=self.represented_flows, simulated_flows=self.flows,
                               steps=self.steps, events=self.engine.events + self._extra_events,
                               rate_computations=self.engine.rate_computations +
                               self._extra_rates, reused_steps=self.reused_steps)

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
                        path_bottleneck=bottleneck, multiplicity=template.multiplicity)
        self._outstanding[links] += 1
        self._real_links[token] = links
        return group

    def _add_virtual(self, template: StepTemplate, nbytes: float, release: float,
                     delay: float) -> int:
        alone = self._solve(template, nbytes)
        virtual = VirtualStep(template, nbytes, release, delay, alone)
        token = self.timer(virtual.end)
        self._virtual[token] = virtual
        ids = alone.busy_links
        self._virtual_until[ids] = np.maximum(self._virtual_until[ids],
                                              virtual.start + alone.busy_ns)
        self.reused_steps += 1
        return token

    def _solve(self, template: StepTemplate, nbytes: float) -> Alone:
        """The step's solution alone on the network (solved once per template and size; the
        solve's work is counted once per run)."""
        key = (id(template), nbytes)
        alone = self._alone.get(key)
        if alone is None:
            alone = self._alone[key] = solve_alone(self.network, template, nbytes)
            self._extra_events += alone.events
            self._extra_rates += alone.rate_computations
        return alone

    def _account_alone(self, virtual: VirtualStep) -> None:
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

    def _count_steps(self, templates, reused: int, counts: tuple[int, int] | None = None,
                     sign: int = 1) -> None:
        flows, represented = flow_counts(templates) if counts is None else counts
        self.steps += sign * len(templates)
        self.flows += sign * flows
        self.represented_flows += sign * represented
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
            hits = overlapping_claims(self._virtual, self._virtual_phases, links,
                                      start + tol, self._virtual_until.size)
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
        self._count_steps(rest, -len(rest), sign=-1)
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
        rest = remainder(self.network, virtual, now)
        add_remainder(engine, virtual, rest, group, now)
        self._extra_bytes += rest.link_bytes    # sent before now: never enters the engine
        self._extra_busy += rest.link_busy
        self._extra_events += rest.events
        self._extra_rates += rest.rate_computations
        self._outstanding[links] += 1
        self._real_links[token] = links
