"""Phases run per NPU (``per_npu`` synchronisation, and trees): their static DAG structure
and the issuer that adds them to a timer.

A rank starts its next step as soon as it has received what the previous step sent it; every
NPU runs its own dimension queues. The timers time the DAG (``Timer.dag_phase``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..network.csr import gather_segments
from .templates import StepTemplate, incoming

if TYPE_CHECKING:
    from .ledger import Ledger
    from .phases import Phase
    from .shapes import PhaseShapes


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
            ptr, local = incoming(templates[index].dst, npus[who])
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



def add_dag_flows(engine, npus: int, dag: PhaseDag, nbytes: list[float], delays: list[float],
                  posts: list[float], before: list[np.ndarray], at: float
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """Put a per-NPU phase into a flow engine as a DAG of flows (the flow model).

    Every participant gets a start marker (a zero-byte flow without links, after ``at`` and
    after its handles in ``before``) and an exit marker (after its start and the last step it
    receives in, plus that step's post-step wait); each message waits for its sender's start
    and for what the sender received in the previous step. Returns the exit and start marker
    ids (the flow model's handles) and the number of message flows added.
    """
    no_links = np.zeros(0, np.int32)
    deps = np.stack([h[dag.npus] for h in before], axis=1) if before else \
        np.full((dag.npus.size, 0), -1, np.int64)
    valid = deps >= 0
    start_ids = engine.add(np.zeros(dag.npus.size + 1, np.int64), no_links, 0.0,
                           release=at, dep_indptr=np.concatenate(
                               [[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64),
                           dep_ids=deps[valid].astype(np.int64))
    start_of = np.full(npus, -1, np.int64)
    start_of[dag.npus] = start_ids
    previous = None
    step_ids = []
    flows = 0
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
        flows += template.src.size
    # exit markers: after the start and the last step each participant receives in
    ptr, flat_ids, delay = dag.exit_dependencies(start_ids, step_ids, posts)
    exits = engine.add(np.zeros(dag.npus.size + 1, np.int64), no_links, 0.0, release=at,
                       delay=delay, dep_indptr=ptr, dep_ids=flat_ids)
    return exits, start_ids, flows


class DagPhases:
    """Issues phases as per-NPU DAGs onto a timer and resolves their times afterwards.

    Parameters
    ----------
    shapes : PhaseShapes
        Steps, groups and DAGs of phases.
    timer : Timer
    ledger : Ledger
        Where finish times, busy spans and dimension bytes are recorded.
    when : callable
        ``when(token, callback)``: call ``callback(t)`` when the timer reports ``token``.
    """

    def __init__(self, shapes: PhaseShapes, timer, ledger: Ledger,
                 when: Callable[[int, Callable[[float], None]], None]) -> None:
        self.shapes = shapes
        self.timer = timer
        self.ledger = ledger
        self.when = when
        self.active_chunks = shapes.system.active_chunks
        # (collective id, phase, participants, exit handles, start handles), resolved at the end
        self._issued: list[tuple[int, Phase, np.ndarray, np.ndarray, np.ndarray]] = []
        self._slots: dict[int, list[np.ndarray]] = {}
        self._slot_turn: dict[int, int] = {}

    @property
    def pending(self) -> bool:
        """Whether phases were issued whose times are not resolved yet."""
        return bool(self._issued)

    def _sizes(self, phase: Phase) -> tuple[list[float], list[float], list[float]]:
        """Bytes per message of each step, the wait before each step and after each step."""
        steps = self.shapes.steps(phase)
        delays = self.shapes.delays(phase)
        return [s.fraction * phase.data for s in steps], delays[:-1], delays[1:]

    def issue(self, cid: int, chunks: list[list[Phase]], at: float,
              on_done: Callable[[float], None] | None) -> None:
        """Add a whole collective as per-NPU DAGs.

        Every NPU runs its own queue per dimension (at most ``active-chunks`` phases in
        flight, in round-robin slots): a phase starts on an NPU once that NPU has left the
        chunk's previous phase and the previous phase of its slot. Phases are queued in
        phase-major order (every chunk's first phase, then every chunk's second, ...), the
        order in which they reach the queues when chunks are alike; the same order on every
        NPU, so unlike ASTRA-sim this never deadlocks.
        """
        timer = self.timer
        npus = self.shapes.network.npus
        exits = [timer.no_handles(npus) for _ in chunks]
        depth = max((len(p) for p in chunks), default=0)
        for i in range(depth):
            for k, phases in enumerate(chunks):
                if i >= len(phases):
                    continue
                phase = phases[i]
                slots = self._slots.setdefault(phase.queue, [
                    timer.no_handles(npus) for _ in range(self.active_chunks)])
                turn = self._slot_turn.get(phase.queue, 0)
                self._slot_turn[phase.queue] = turn + 1
                slot = turn % len(slots)
                dag = self.shapes.dag(phase)
                nbytes, delays, posts = self._sizes(phase)
                handles, starts = timer.dag_phase(dag, nbytes, delays, posts,
                                                  [exits[k], slots[slot]], at)
                updated = exits[k].copy()
                updated[dag.npus] = handles
                exits[k] = updated
                slots[slot] = updated
                self._issued.append((cid, phase, dag.npus, handles, starts))
        if on_done is not None:
            self.when(timer.join(exits, at), on_done)

    def start(self, phase: Phase, t: float) -> int:
        """A per-NPU phase (a tree) taken from a barrier queue: its steps run per NPU, and the
        returned token is due when its last NPU has left (ASTRA-sim 1.0's stream barrier)."""
        dag = self.shapes.dag(phase)
        nbytes, delays, posts = self._sizes(phase)
        handles, _ = self.timer.dag_phase(dag, nbytes, delays, posts, [], t)
        for template, size in zip(dag.templates, nbytes):
            self.ledger.dim_bytes += self.shapes.dim_bytes_per_byte(template) * size
        return self.timer.join([handles], t)

    def resolve(self) -> None:
        """Per-NPU exit times of the issued DAG phases -> finish times and busy spans."""
        ledger = self.ledger
        for cid, phase, npus, handles, starts in self._issued:
            times = self.timer.resolve(handles)
            begin = float(np.min(self.timer.resolve(starts))) if starts.size else 0.0
            np.maximum.at(ledger.npu_finish, npus, times)
            end = float(np.max(times)) if times.size else 0.0
            ledger.collective_end[cid] = max(ledger.collective_end[cid], end)
            ledger.busy(self.shapes.dims_used(phase), begin, end)
        self._issued = []
