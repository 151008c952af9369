"""Issuing phases as per-NPU DAGs (``per_npu`` synchronisation, and trees) onto a timer, and
resolving their times when the run is over.

A rank starts its next step as soon as it has received what the previous step sent it; every
NPU runs its own dimension queues. The timers time the DAG (``Timer.dag_phase``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from .._weak import weak_method
from .ledger import Ledger
from .phases import Phase
from .shapes import PhaseShapes


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
        self.when = weak_method(when)   # the schedule holds this object: no cycle
        self.active_chunks = shapes.system.active_chunks
        # (collective id, phase, participants, exit handles, start handles), resolved at the end
        self._issued: list[tuple[int, Phase, np.ndarray, np.ndarray, np.ndarray]] = []
        self._slots: dict[Hashable, list[np.ndarray]] = {}   # keyed by Phase.queue
        self._slot_turn: dict[Hashable, int] = {}

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
