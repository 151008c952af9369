"""The system layer's scheduler: chunks through dimension queues, steps onto a timer.

Each chunk of a collective walks through its phases (see :mod:`.phases`). Every dimension is a
queue that runs at most ``active-chunks-per-dimension`` chunks at once; waiting chunks are
served by priority (LIFO: the most recently issued collective first; FIFO: the oldest), and in
arrival order among equal priorities (all chunks of one collective share a priority, as in
ASTRA-sim). A phase pays one endpoint delay before its first step and, after every step, one
endpoint delay plus the local-reduction cost of what it received (:mod:`.cost`).

Step synchronisation:

``barrier`` (ASTRA-sim)
    A step's messages on every group start together once the previous step has completely
    finished. A whole phase is handed to the timer at once when it can time it so
    (:meth:`~.timer.Timer.whole_phase`), else step by step.
``per_npu``
    A rank starts its next step as soon as it has received what the previous step sent it;
    the phase ends when its last message has arrived (:mod:`.dag`).

The timer (the network model, :mod:`.timer`) only decides how long things take; the scheduler
never asks which model it is.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from ..collectives import base_algorithm
from ..errors import SimulationError
from .config import SystemConfig
from .dag_phases import DagPhases
from .ledger import Ledger
from .phase_plan import PhasePlan
from .phases import Phase
from .quotient import Quotient
from .shapes import phase_shapes, replicable_phase
from .templates import StepTemplate
from .timer import Timer, make_timer


@dataclass
class _Chunk:
    collective_id: int
    index: int
    phases: list[Phase]
    key: float
    phase: int = 0


class Schedule:
    """Runs collectives on one network under one system config and network model.

    Parameters
    ----------
    network : Network or FabricNetwork
    system : SystemConfig
    model : {"analytical", "flow"}
    trace : bool
        Keep a log of every barrier step (and per-message times) for timelines.
    replicate : bool
        Simulate only the first group of every replicable phase (see :func:`can_replicate`).
    replay : bool
        Flow model: replay steps whose links are free from their solution alone (exact).
    npu_finish : bool
        Keep when each NPU last left a phase (``ledger.npu_finish``: a collective's record;
        a training loop keeps its own).
    quotient : Quotient, optional
        Time one message per orbit of these symmetries (:mod:`.quotient`; not with
        ``replicate``).
    """

    def __init__(self, network, system: SystemConfig, model: str, trace: bool = False,
                 replicate: bool = False, replay: bool = True, npu_finish: bool = True,
                 quotient: Quotient | None = None) -> None:
        self.network = network
        self.system = system
        self.model = model
        self.replicate = replicate
        self.quotient = quotient
        self.npu_finish = npu_finish
        self.timer: Timer = make_timer(model, network, replay=replay, keep_flows=trace)
        self.shapes = phase_shapes(network, system, replicate=replicate, quotient=quotient,
                                   lowest_dim_for_flat=self.timer.prices_flat_by_lowest_dim)
        self.ledger = Ledger(network.npus, network.ndims)
        self.dags = DagPhases(self.shapes, self.timer, self.ledger, self.when)
        #: step log for timelines (see :mod:`flowsim.results.trace`), kept only when tracing
        self.trace_log: list[dict] | None = [] if trace else None
        self._queues: dict[Hashable, list] = {}   # keyed by Phase.queue
        #: queues holding waiting chunks, by when each queue was first used (the order
        #: admission visits them in)
        self._nonempty: dict[Hashable, int] = {}
        #: queues whose waiting chunks or running count changed since the last admission;
        #: any other queue is empty or full, as admission left it
        self._changed: set[Hashable] = set()
        self._rank: dict[Hashable, int] = {}
        self._running: dict[Hashable, int] = {}
        #: chunks waiting in all queues (admission is a no-op at zero: most events)
        self._waiting = 0
        self._seq = itertools.count()
        self._counter = 0
        self._collectives = 0
        self._chunks_left: dict[int, int] = {}
        self._on_done: dict[int, Callable[[float], None]] = {}
        self._actions: dict[int, tuple[Callable, tuple]] = {}

    # ------------------------------------------------------------------ public
    def issue(self, chunks: list[list[Phase]], at: float = 0.0, *,
              on_done: Callable[[float], None] | None = None,
              policy: str | None = None) -> int:
        """Issue one collective (the phase list of each chunk) at time ``at``; returns its id.

        ``on_done(t)`` is called when its last chunk has finished. ``policy`` (``LIFO``,
        ``FIFO`` or ``highest``) overrides the system's scheduling policy for this collective.
        """
        cid = self._collectives
        self._collectives += 1
        self.ledger.collective_end[cid] = at
        if self._per_npu(chunks):
            self.dags.issue(cid, chunks, at, on_done)
            return cid
        if on_done is not None:
            self._on_done[cid] = on_done
        self._chunks_left[cid] = len(chunks)
        key = self._priority_key(policy or self.system.scheduling_policy)
        for i, phases in enumerate(chunks):
            chunk = _Chunk(cid, i, phases, key)
            if phases:
                self._enqueue(chunk)
            else:
                self._chunk_done(chunk, at)
        return cid

    def run(self) -> None:
        """Advance until every issued collective has finished."""
        while self.advance():
            pass
        if self.dags.pending:   # per-NPU phases nothing waits for: run them out
            self.timer.run_all()
            self.dags.resolve()

    def advance(self) -> bool:
        """Handle the next batch of due events (step and phase ends, timers); ``False`` when
        nothing is pending. Collectives issued since the last call compete for the queues
        by priority (LIFO / FIFO) before time moves on."""
        self._admit(self.timer.now)
        if not self._actions:
            return False
        due = self.timer.run()
        if not due:   # progress guard: pending work and no event would loop forever
            raise SimulationError(f"stalled at t={self.timer.now:.6g} ns: {len(self._actions)} "
                                  f"event(s) pending, none due")
        for token, t in due:
            if not math.isfinite(t):
                raise SimulationError(f"an event's time is {t} ns (inputs too extreme for "
                                      f"float64); no result")
            callback, args = self._actions.pop(token)
            callback(*args, t)
        self._admit(self.timer.now)
        return True

    def when(self, token: int, callback: Callable[..., None], *args) -> None:
        """Call ``callback(*args, t)`` from :meth:`advance` when the timer reports ``token``."""
        self._actions[token] = (callback, args)

    def at(self, t: float, callback: Callable[..., None], *args) -> None:
        """Call ``callback(*args, t)`` at time ``t`` (>= now) from :meth:`advance`."""
        if not math.isfinite(t):   # a NaN time would never come due
            raise SimulationError(f"an event was scheduled at t={t} ns (inputs too extreme "
                                  f"for float64); no result")
        self.when(self.timer.timer(t), callback, *args)

    def finish(self) -> None:
        """After the last :meth:`advance`: resolve per-NPU phases for the statistics."""
        self.dags.resolve()

    @property
    def now(self) -> float:
        return self.timer.now

    def message(self, template: StepTemplate, nbytes: float, release: float, delay: float,
                callback: Callable[[float], None]) -> None:
        """Send the messages of ``template`` (``nbytes`` each) after ``release + delay``;
        ``callback(t)`` when the last has arrived."""
        token = self.timer.step(template, nbytes, release, delay)
        self._count_dim_bytes(template, nbytes)
        dims = template.dims_between(self.network)
        start = release + delay

        def arrived(t: float) -> None:
            self.ledger.busy(dims, start, t)
            callback(t)

        self.when(token, arrived)

    def expand_replicated(self, per_link: np.ndarray) -> np.ndarray:
        """Copy the first instance's per-link values of every dimension to all its instances
        (the identity unless this schedule replicates), or every orbit's representative's to
        its links."""
        if self.quotient is not None:
            return self.quotient.expand_links(per_link)
        if not self.replicate:
            return per_link
        return self.network.tile_first_instance(per_link)

    # ------------------------------------------------------------------ queues
    def _per_npu(self, chunks: list[list[Phase]]) -> bool:
        if self.system.synchronization == "per_npu":
            return True
        # ASTRA-sim 1.0 queues tree phases like any other and leaves them together
        return not self.system.phase_barrier and any(
            base_algorithm(ph.algorithm).per_npu_only for phases in chunks for ph in phases)

    def _priority_key(self, policy: str) -> float:
        """Queue key (smallest served first) from ASTRA-sim's priorities: one counter that
        LIFO issues count up and FIFO issues count down; ``highest`` beats both."""
        if policy == "highest":
            return -1e18
        priority = self._counter
        self._counter += 1 if policy == "LIFO" else -1
        return -priority

    def _enqueue(self, chunk: _Chunk) -> None:
        queue = chunk.phases[chunk.phase].queue
        waiting = self._queues.get(queue)
        if waiting is None:
            waiting = self._queues[queue] = []
            self._rank[queue] = len(self._rank)
        heapq.heappush(waiting, (chunk.key, next(self._seq), chunk))
        self._nonempty[queue] = self._rank[queue]
        self._changed.add(queue)
        self._waiting += 1

    def _admit(self, now: float) -> None:
        if not self._waiting:
            self._changed.clear()
            return
        limit = self.system.active_chunks
        nonempty = self._nonempty
        # the changed queues with waiting chunks, oldest queue first (starting a phase never
        # enqueues a chunk: its end does, from an event)
        changed = [queue for queue in self._changed if queue in nonempty]
        self._changed.clear()
        if len(changed) > 1:
            changed.sort(key=nonempty.__getitem__)
        for queue in changed:
            waiting = self._queues[queue]
            while waiting and self._running.get(queue, 0) < limit:
                _, _, chunk = heapq.heappop(waiting)
                self._waiting -= 1
                self._running[queue] = self._running.get(queue, 0) + 1
                self._start_phase(chunk, now)
            if not waiting:
                del self._nonempty[queue]

    def _phase_done(self, chunk: _Chunk, start: float, t: float) -> None:
        phase = chunk.phases[chunk.phase]
        self.ledger.busy(self.shapes.dims_used(phase), start, t)
        if self.npu_finish:
            self.ledger.npu_finish[self.shapes.groups(phase).ravel()] = t
        self._running[phase.queue] -= 1
        self._changed.add(phase.queue)
        chunk.phase += 1
        if chunk.phase < len(chunk.phases):
            self._enqueue(chunk)
        else:
            self._chunk_done(chunk, t)

    def _chunk_done(self, chunk: _Chunk, t: float) -> None:
        cid = chunk.collective_id
        self._chunks_left[cid] -= 1
        ends = self.ledger.collective_end
        ends[cid] = max(ends[cid], t)
        if self._chunks_left[cid] == 0 and cid in self._on_done:
            self._on_done.pop(cid)(t)

    # ------------------------------------------------------------------ phases and steps
    def _count_dim_bytes(self, template: StepTemplate, nbytes: float) -> None:
        self.ledger.dim_bytes += self.shapes.dim_bytes_per_byte(template) * nbytes

    def _start_phase(self, chunk: _Chunk, t: float) -> None:
        phase = chunk.phases[chunk.phase]
        if base_algorithm(phase.algorithm).per_npu_only:
            self.when(self.dags.start(phase, t), self._phase_done, chunk, t)
            return
        plan = self.shapes.plan(phase)
        if self.trace_log is None and self._whole_phase(chunk, plan, t):
            return
        self._start_step(chunk, plan, 0, t, t)

    def _whole_phase(self, chunk: _Chunk, plan: PhasePlan, t: float) -> bool:
        """Hand a whole barrier phase to the timer (``False`` if it must go step by step).

        Should the timer hand the phase back later (the flow model, when something needs its
        links), the rest runs step by step from the step it is in."""
        token = -1

        def resume(index: int, release: float) -> None:
            del self._actions[token]
            # the steps from ``index`` on were counted with the phase; the step path recounts
            for per_dim, template in zip(plan.step_dim_bytes[index:], plan.templates[index:]):
                self.ledger.dim_bytes -= per_dim
                self.ledger.represented_flows -= template.represented_flows
            if index < len(plan.templates):
                self._start_step(chunk, plan, index, t, release)
            else:
                self._after_last_step(chunk, plan, t, release)

        handed = self.timer.whole_phase(plan, t, resume)
        if handed is None:
            return False
        token = handed
        self.ledger.dim_bytes += plan.dim_bytes
        self.ledger.represented_flows += plan.represented
        self.when(token, self._phase_done, chunk, t)
        return True

    def _start_step(self, chunk: _Chunk, plan: PhasePlan, index: int, phase_start: float,
                    release: float) -> None:
        nbytes = plan.sizes[index]
        template = plan.templates[index]
        token = self.timer.step(template, nbytes, release, plan.delays[index])
        self.ledger.represented_flows += template.represented_flows
        self._count_dim_bytes(template, nbytes)
        entry = None
        if self.trace_log is not None:
            phase = chunk.phases[chunk.phase]
            entry = {"template": template, "nbytes": nbytes, "chunk": chunk.index,
                     "phase": chunk.phase, "step": index, "dims": phase.dims,
                     "label": f"{phase.collective} {phase.algorithm}",
                     "start": release + plan.delays[index], "end": np.nan, "token": token}
            self.trace_log.append(entry)
        self.when(token, self._step_done, chunk, plan, index, phase_start, entry)

    def _step_done(self, chunk: _Chunk, plan: PhasePlan, index: int, phase_start: float,
                   entry: dict | None, t: float) -> None:
        if entry is not None:
            entry["end"] = t
        if index + 1 < len(plan.templates):
            self._start_step(chunk, plan, index + 1, phase_start, t)
        else:
            self._after_last_step(chunk, plan, phase_start, t)

    def _after_last_step(self, chunk: _Chunk, plan: PhasePlan, phase_start: float,
                         t: float) -> None:
        self.at(t + plan.delays[-1], self._phase_done, chunk, phase_start)


def can_replicate(network, system: SystemConfig, chunks: list[list[Phase]],
                  trace: bool) -> bool:
    """Whether simulating one group per phase gives every group's timing exactly.

    The groups of one dimension are replicas: the same link structure, bandwidth and latency,
    and their flows never share a link with another group's. Under barrier synchronisation they
    all start every step together, so each sees exactly what the first one sees. That holds for
    per-dimension phases of all-reduce, reduce-scatter, all-gather and all-to-all; not for flat
    (``one*``) phases, whose messages cross dimensions, nor for broadcast and reduce, which run
    on some groups only.
    """
    if trace or system.synchronization != "barrier" or not network.replicable:
        return False
    if any(getattr(network, "split", ())):
        return False   # per-link results of a piece's replicas cannot be tiled back
    return all(replicable_phase(ph) for phases in chunks for ph in phases)
