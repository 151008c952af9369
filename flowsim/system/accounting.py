"""Where a training run's time went: per NPU and per layer and pass.

Every NPU's time splits into compute, exposed communication (waiting for collectives, then
collectives still running after its last op), pipeline bubble (waiting for point-to-point
receives) and idle time. A wait is charged once: from when the compute resource and the op's
other inputs were ready to when the last communication it waited for had finished. A wait on
a receive, or on communication that itself waited for a receive (sequence parallelism's
all-gather of a stage's input), is bubble up to the receive's arrival and exposed
communication after it.
"""

from __future__ import annotations

import math

import numpy as np

from ..results.workload import RunRecord
from ..workload.graph import PASSES, Op
from .npu_times import Times
from .program_state import ProgramState


class TimeAccounts:
    """Time tables of one run, filled in by the engine as ops run.

    Parameters
    ----------
    npus : int
        NPUs of the network.
    layers : int
        Layers of the workload (one more row collects ops of no layer).
    """

    def __init__(self, npus: int, layers: int) -> None:
        self.npu_compute = np.zeros(npus)
        self.npu_exposed = np.zeros(npus)
        self.npu_bubble = np.zeros(npus)
        self.npu_finish = np.zeros(npus)
        #: last compute, host or memory op of each NPU (what runs after it is a tail)
        self.local_end = np.zeros(npus)
        self.layer_compute = np.zeros((layers + 1, len(PASSES)))
        self.layer_exposed = np.zeros((layers + 1, len(PASSES)))
        self.layer_comm = np.zeros((layers + 1, len(PASSES)))
        #: programs that ran ops of each layer (per-layer values are means over their NPUs)
        self.layer_programs: list[set[int]] = [set() for _ in range(layers + 1)]

    def charge(self, table: np.ndarray, st: ProgramState, op: Op, value: float) -> None:
        """Add ``value`` (summed over the program's NPUs) to an op's layer and pass."""
        row = op.layer if op.layer >= 0 else table.shape[0] - 1
        col = PASSES.index(op.pass_) if op.pass_ in PASSES else PASSES.index("fwd")
        table[row, col] += value
        self.layer_programs[row].add(st.index)

    def compute(self, st: ProgramState, op: Op, durations: Times) -> None:
        """A compute op ran for ``durations`` on the program's tracked NPUs."""
        st.times.add_to(self.npu_compute, durations)
        self.charge(self.layer_compute, st, op, st.times.total(durations) * st.weight)

    def exposure(self, st: ProgramState, op: Op, free: Times) -> None:
        """Charge the wait of compute op ``op`` for its communication (see the module
        docstring); ``free`` is when its NPUs' compute resource was free."""
        if st.times.scalar:
            self._exposure_of_one(st, op, free)
            return
        base, times, comm_ids = st.waits.pop(op.id)
        latest = times.max(axis=0)
        exposed = np.maximum(latest - np.maximum(base, free), 0.0)
        if not exposed.any():
            return
        start = latest - exposed
        if len(comm_ids) == 1:   # the common case: one op waited for, it binds everywhere
            arrived = pipeline_end(st, comm_ids[0], times[0])
        else:
            binding = times.argmax(axis=0)
            arrived = np.array([pipeline_end(st, d, times[j]) for j, d in
                                enumerate(comm_ids)])[binding, np.arange(binding.size)]
        bubble = np.clip(arrived - start, 0.0, exposed)
        exposed = exposed - bubble
        self.npu_bubble[st.rep] += bubble
        self.npu_exposed[st.rep] += exposed
        for j, d in enumerate(comm_ids):
            total = float((exposed if len(comm_ids) == 1 else exposed[binding == j]).sum())
            if total:
                self.charge(self.layer_exposed, st, st.ops[d], total * st.weight)

    def _exposure_of_one(self, st: ProgramState, op: Op, free: float) -> None:
        """:meth:`exposure` of a program tracking one NPU, on floats (the same arithmetic:
        the latest wait binds, the first of equal ones)."""
        base, times, comm_ids = st.waits.pop(op.id)
        latest = max(times)
        exposed = max(latest - max(base, free), 0.0)
        if not exposed:
            return
        start = latest - exposed
        binding = times.index(latest)
        arrived = pipeline_end(st, comm_ids[binding], times[binding])
        bubble = min(max(arrived - start, 0.0), exposed)
        exposed = exposed - bubble
        st.times.add_to(self.npu_bubble, bubble)
        st.times.add_to(self.npu_exposed, exposed)
        if exposed:
            self.charge(self.layer_exposed, st, st.ops[comm_ids[binding]],
                        exposed * st.weight)

    def expand_uniform(self, states: list[ProgramState]) -> None:
        """A uniform program's NPUs all did what its first did: copy its times to them."""
        for st in states:
            if st.rep.size < st.npus.size:
                for values in (self.npu_finish, self.npu_compute, self.npu_exposed,
                               self.npu_bubble, self.local_end):
                    values[st.npus] = values[st.rep[0]]

    def record(self, **rest) -> RunRecord:
        """The run's :class:`RunRecord`: these tables and ``rest`` (the schedule's)."""
        return RunRecord(
            npu_finish_ns=self.npu_finish.copy(), npu_compute_ns=self.npu_compute.copy(),
            npu_exposed_ns=self.npu_exposed + np.maximum(self.npu_finish - self.local_end, 0),
            npu_blocked_ns=self.npu_exposed + self.npu_bubble,
            npu_bubble_ns=self.npu_bubble.copy(),
            layer_compute_ns=self.layer_compute, layer_exposed_ns=self.layer_exposed,
            layer_comm_ns=self.layer_comm, **rest)


def note_pipeline(st: ProgramState, op: Op, comm_ids: list[int]) -> None:
    """Remember when the receives feeding communication op ``op`` arrived."""
    fed = [st.seen[d] if st.ops[d].kind == "recv" else st.pipeline[d]
           for d in comm_ids if st.ops[d].kind == "recv" or d in st.pipeline]
    if fed:
        st.pipeline[op.id] = st.times.latest(fed)


def pipeline_end(st: ProgramState, op_id: int, seen: Times) -> Times:
    """Until when a wait on communication op ``op_id`` (finished at ``seen``) was a wait on
    the pipeline (``-inf``: never)."""
    if st.ops[op_id].kind == "recv":
        return seen
    arrived = st.pipeline.get(op_id)
    if arrived is not None:
        return arrived
    return -math.inf if st.times.scalar else np.full(seen.shape, -np.inf)


def layer_npus(layer_programs: list[set[int]], program_npus: list[np.ndarray]) -> np.ndarray:
    """NPUs running each layer: those of its programs (the layers of a pipeline stage share
    one set of programs, counted once)."""
    counted: dict[tuple[int, ...], int] = {}
    out = []
    for programs in map(tuple, map(sorted, layer_programs)):
        if programs not in counted:
            counted[programs] = np.unique(np.concatenate(
                [program_npus[i] for i in programs])).size if programs else 0
        out.append(counted[programs])
    return np.array(out)
