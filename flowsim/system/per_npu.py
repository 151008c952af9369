"""Phases run per NPU (``per_npu`` synchronisation, and trees): the part of
:class:`~flowsim.system.scheduler.Schedule` that issues them as DAGs of flows.

A rank starts its next step as soon as it has received what the previous step sent it; every
NPU runs its own dimension queues. The backends time the DAG (see
:meth:`~flowsim.system.backends.AnalyticalTimer.phase`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..collectives import base_algorithm
from ..collectives.base import Step
from .backends import PhaseDag
from .phases import Phase

if TYPE_CHECKING:
    from .scheduler import _Chunk


class PerNpuPhases:
    """Mixin of :class:`~flowsim.system.scheduler.Schedule`: per-NPU phases (it owns the
    state these methods use)."""

    def _per_npu(self, chunks: list[list[Phase]]) -> bool:
        if self.system.synchronization == "per_npu":
            return True
        # ASTRA-sim 1.0 queues tree phases like any other and leaves them together
        return not self.system.phase_barrier and any(
            base_algorithm(ph.algorithm).per_npu_only for phases in chunks for ph in phases)

    def _none(self) -> np.ndarray:
        if self.model == "analytical":
            return np.full(self.network.npus, np.nan)
        return np.full(self.network.npus, -1, np.int64)

    def _issue_per_npu(self, chunks: list[list[Phase]], at: float) -> int:
        """Add a whole collective as per-NPU DAGs.

        Every NPU runs its own queue per dimension (at most ``active-chunks`` phases in
        flight, in round-robin slots): a phase starts on an NPU once that NPU has left the
        chunk's previous phase and the previous phase of its slot. Phases are queued in
        phase-major order (every chunk's first phase, then every chunk's second, ...), the
        order in which they reach the queues when chunks are alike; the same order on every
        NPU, so unlike ASTRA-sim this never deadlocks.
        """
        cid = len(self._chunks_left)
        self._chunks_left[cid] = 0
        self.collective_end[cid] = at
        exits = [self._none() for _ in chunks]
        depth = max((len(p) for p in chunks), default=0)
        for i in range(depth):
            for k, phases in enumerate(chunks):
                if i >= len(phases):
                    continue
                phase = phases[i]
                slots = self._slots.setdefault(phase.queue, [self._none() for _ in range(
                    self.system.active_chunks)])
                turn = self._slot_turn.get(phase.queue, 0)
                self._slot_turn[phase.queue] = turn + 1
                slot = turn % len(slots)
                dag, steps = self._dag(phase)
                nbytes = [s.fraction * phase.data for s in steps]
                delays = [self.system.endpoint_delay_ns] + [self._post_step_delay(phase, s)
                                                            for s in steps[:-1]]
                posts = [self._post_step_delay(phase, s) for s in steps]
                handles, starts = self.timer.phase(dag, nbytes, delays, posts,
                                                   [exits[k], slots[slot]], at)
                updated = exits[k].copy()
                updated[dag.npus] = handles
                exits[k] = updated
                slots[slot] = updated
                self._static.append((cid, phase, dag.npus, handles, starts))
        callback = self._on_done.pop(cid, None)
        if callback is not None:
            token = self.timer.join([h for h in exits], at)
            self._actions[token] = (lambda t: callback(t), ())
        return cid

    def _dag(self, phase: Phase) -> tuple[PhaseDag, list[Step]]:
        steps = self._steps(phase)
        key = (phase.dims, phase.algorithm, phase.collective, phase.direction,
               phase.in_network, phase.root, phase.variant, phase.flat, phase.members,
               phase.scope)
        dag = self._dags.get(key)
        if dag is None:
            templates = self._templates_for(phase, steps, with_dependencies=True)
            dag = PhaseDag.build(templates, self._groups(phase).ravel())
            dag.idle_exit_delay = self.system.endpoint_delay_ns
            self._dags[key] = dag
        return dag, steps

    def _resolve_static(self) -> None:
        """Per-NPU exit times of the DAG phases -> finish times and busy spans."""
        for cid, phase, npus, handles, starts in self._static:
            times = self.timer.resolve(handles)
            begin = float(np.min(self.timer.resolve(starts))) if starts.size else 0.0
            np.maximum.at(self.npu_finish, npus, times)
            end = float(np.max(times)) if times.size else 0.0
            self.collective_end[cid] = max(self.collective_end[cid], end)
            for d in self._dims_used(phase):
                self._busy[d].append((begin, end))
        self._static = []

    def _start_dag_phase(self, chunk: _Chunk, phase: Phase, t: float) -> None:
        """A per-NPU phase (a tree) taken from a queue: its steps run per NPU, and the chunk
        leaves the phase when its last NPU does (ASTRA-sim 1.0's stream barrier)."""
        dag, steps = self._dag(phase)
        nbytes = [s.fraction * phase.data for s in steps]
        delays = [self.system.endpoint_delay_ns] + [self._post_step_delay(phase, s)
                                                    for s in steps[:-1]]
        posts = [self._post_step_delay(phase, s) for s in steps]
        handles, _ = self.timer.phase(dag, nbytes, delays, posts, [], t)
        for template, size in zip(dag.templates, nbytes):
            self._count_dim_bytes(template, size)
        token = self.timer.join([handles], t)
        self._actions[token] = (self._phase_done, (chunk, t))
