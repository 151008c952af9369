"""Phases run per NPU (``per_npu`` synchronisation, and trees): their static DAG structure,
and how the flow model puts one into its engine (:func:`add_dag_flows`).

A rank starts its next step as soon as it has received what the previous step sent it; every
NPU runs its own dimension queues. The timers time the DAG (``Timer.dag_phase``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._arrays import gather_segments
from .templates import StepTemplate, incoming


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
    previous: np.ndarray | None = None
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
            assert previous is not None and template.dep_local is not None   # index > 0
            dep_ids[rest] = previous[template.dep_local]
        else:
            dep_indptr = np.arange(own.size + 1, dtype=np.int64)
            dep_ids = own
        # merged flows: their bottleneck is one link's, not the engine capacity of its group
        latency, bottleneck = template.engine_paths() if template.multiplicity is not None \
            else (None, None)
        ids = engine.add(template.indptr, template.links, template.flow_bytes(size),
                         release=at, delay=delay, dep_indptr=dep_indptr, dep_ids=dep_ids,
                         path_latency=latency, path_bottleneck=bottleneck,
                         multiplicity=template.multiplicity)
        step_ids.append(ids)
        previous = ids
        flows += template.src.size
    # exit markers: after the start and the last step each participant receives in
    ptr, flat_ids, exit_delay = dag.exit_dependencies(start_ids, step_ids, posts)
    exits = engine.add(np.zeros(dag.npus.size + 1, np.int64), no_links, 0.0, release=at,
                       delay=exit_delay, dep_indptr=ptr, dep_ids=flat_ids)
    return exits, start_ids, flows
