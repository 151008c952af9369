"""The training-loop engine: workload ops, collectives and flows in one event loop.

Every NPU has one compute resource (one compute op at a time, granted in order of readiness)
and hands its collectives to the system layer's :class:`~flowsim.system.scheduler.Schedule`,
whose dimension queues decide how many run at once (one chunk per dimension by default, as in
ASTRA-sim); ``collective_streams`` optionally caps the collectives a program has in flight.
Point-to-point messages go straight to the network model. Time only moves forward: an op
becomes ready when its dependencies have finished, waits in a heap keyed by that time, and is
started when the network side has caught up with it.

A program run by many NPUs is simulated once, with per-NPU time arrays (speed factors make
NPUs differ); one collective op of such a program is one collective instance over all its
groups, issued when the last of its NPUs reaches it. One-NPU programs (Chakra traces) meet
in a collective when every NPU taking part has reached its matching op (the k-th op on the
same communicator).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..results.workload import RunRecord
from ..workload.graph import Op, Program, Workload
from ..workload.memory import MemoryConfig
from .accounting import TimeAccounts, layer_npus, note_pipeline
from .config import SystemConfig
from .custom import issue_custom
from .deadlock import deadlock_error
from .memory_servers import MemoryServers
from .npu_times import Times
from .op_prices import compute_op_ns
from .phases import collective_chunks
from .point_to_point import PointToPoint, peers
from .program_state import ProgramState, program_state, uniform_program
from .quotient import Quotient, SymmetryBroken, find_quotient, symmetric_system
from .rendezvous import CollectiveRendezvous
from .scheduler import Schedule

if TYPE_CHECKING:
    from ..compute import ComputeModel

_COMM = ("collective", "send", "recv")


class WorkloadEngine:
    """Runs a :class:`Workload` on a network under a system config and a network model.

    Parameters
    ----------
    network, system, model : as for :func:`flowsim.simulate_collective`.
    workload : Workload
        Validated programs (see :func:`flowsim.workload.validate.check_workload`).
    speed : ndarray, shape (npus,)
        Compute speed factor per NPU (compute time is divided by it).
    compute : compute model, optional
        Times compute ops given as kernels or as FLOPs and bytes (a
        :class:`~flowsim.compute.DeviceModel` or a
        :class:`~flowsim.workload.roofline.Roofline`: anything with ``kernels_ns`` and
        ``work_ns``).
    memory : MemoryConfig
    collective_streams : int, optional
        At most this many collectives of one program in flight (``None``: no cap beyond the
        dimension queues, ASTRA-sim's behaviour).
    timeline : bool
        Keep op start and end times for a Chrome trace.
    replay : bool
        Flow model: replay steps whose links are free from their solution alone (exact).
    quotient : Quotient, optional
        Flow model: time one message per orbit of these symmetries (:mod:`.quotient`);
        raises :class:`~.quotient.SymmetryBroken` where the run turns out not to have them.
    """

    def __init__(self, network, workload: Workload, system: SystemConfig,
                 model: str, *, speed: np.ndarray, compute: ComputeModel | None = None,
                 memory: MemoryConfig | None = None, collective_streams: int | None = None,
                 timeline: bool = False, replay: bool = True,
                 quotient: Quotient | None = None) -> None:
        self.net = network
        self.workload = workload
        self.system = system
        self.speed = speed
        self.compute = compute
        self._priced: dict[int, tuple[tuple, float]] = {}
        self.streams = collective_streams
        self.keep_timeline = timeline
        # one group standing for its replicas is exact only where nothing else is in flight:
        # under the flow model a training loop's other traffic meets some groups and not
        # others, so there the quotient (:mod:`.quotient`) or every group is simulated
        replicable = network.replicable and system.synchronization == "barrier" and \
            model == "analytical"
        self.schedule = Schedule(network, system, model, replicate=replicable, replay=replay,
                                 npu_finish=False, quotient=quotient)
        self.memory = MemoryServers(memory or MemoryConfig(), network.npus,
                                    system.local_mem_bw_gbps or math.inf)
        self.compute_free = np.zeros(network.npus)
        self.host_free = np.zeros(network.npus)  # each NPU's host CPU (Chakra is_cpu_op ops)
        self.accounts = TimeAccounts(network.npus, len(workload.layers))
        self.states = [self._state(i, p) for i, p in enumerate(workload.programs)]
        #: the workload's own programs (custom collectives append states of their own)
        self.programs = len(self.states)
        self._heap: list[tuple[float, int, int, int]] = []
        self._wakeups: set[float] = set()
        self._due = 0.0
        self.rendezvous = CollectiveRendezvous(self.programs, network.npus)
        self.p2p = PointToPoint(self.schedule, system.endpoint_delay_ns, self._complete)
        #: custom collective traces by prefix, read once
        self.custom_traces: dict[str, list] = {}
        self.collectives = 0
        self._phase_cache: dict[tuple, list] = {}
        self.timeline: list[dict] = []

    def _state(self, index: int, program: Program) -> ProgramState:
        st = program_state(index, program, self.net.npus,
                           uniform=uniform_program(program, self.speed, self.system))
        st.speed = st.times.read(self.speed)
        return st

    def add_program(self, program: Program, *, origin: float,
                    on_finish: Callable[[float], None]) -> ProgramState:
        """Run another program (a rank of a custom collective) whose ops start no earlier
        than ``origin``; ``on_finish(t)`` when its last op has finished."""
        st = self._state(len(self.states), program)
        st.origin, st.on_finish = origin, on_finish
        self.states.append(st)
        for op_id, n in st.remaining.items():
            if n == 0:
                self._make_ready(st, st.ops[op_id])
        return st

    # ------------------------------------------------------------------ main loop
    def run(self) -> RunRecord:
        for st in self.states:
            for op_id, left in st.remaining.items():
                if left == 0:
                    self._make_ready(st, st.ops[op_id])
        schedule = self.schedule
        while True:
            while self._heap and self._heap[0][0] <= max(schedule.now, self._due):
                t, index, _, op_id = heapq.heappop(self._heap)
                st = self.states[index]
                self._start(st, st.ops[op_id], max(t, schedule.now))
            if self._heap and self._heap[0][0] not in self._wakeups:
                t = self._heap[0][0]
                self._wakeups.add(t)
                schedule.at(t, self._woken)
            if not schedule.advance():
                if not self._heap:
                    break
        schedule.finish()
        self._check_finished()
        return self._record()

    def _woken(self, t: float) -> None:
        # ops due at t run now even if the network model's clock reads a hair earlier
        self._wakeups.discard(t)
        self._due = max(self._due, t)

    def _make_ready(self, st: ProgramState, op: Op) -> None:
        """All dependencies known: compute when the op may start and what it waited for."""
        tv = st.times
        # the scalar origin broadcasts; the same maxima as full arrays of it, fewer calls
        ctrl = st.origin
        if op.ctrl_deps:
            ctrl = tv.maximum(ctrl, tv.latest([st.end[d] for d in op.ctrl_deps]) + op.gap_ns)
        comm_ids: list[int] = []
        other: list[int] = []
        for d in op.deps:
            (comm_ids if st.ops[d].kind in _COMM else other).append(d)
        base = tv.maximum(ctrl, tv.latest([st.seen[d] for d in other])) if other else ctrl
        if not tv.scalar and not isinstance(base, np.ndarray):
            base = tv.full(base)
        ready = base
        if comm_ids:
            times = [st.seen[d] for d in comm_ids]
            if op.kind in _COMM:
                note_pipeline(st, op, comm_ids)
            ready = tv.maximum(base, tv.latest(times))
            if op.kind == "compute":   # exposure takes them per NPU: (comm ops, NPUs)
                st.waits[op.id] = (base, times if tv.scalar else np.array(times), comm_ids)
        st.ready[op.id] = ready
        heapq.heappush(self._heap, (tv.peak(ready), st.index, st.order[op.id], op.id))

    def _complete(self, st: ProgramState, op: Op, end: Times, seen: Times | None = None
                  ) -> None:
        st.end[op.id] = end
        st.seen[op.id] = end if seen is None else seen
        st.times.raise_to(self.accounts.npu_finish, end)
        if self.keep_timeline:   # every NPU's times (results.trace bounds what it writes)
            self.timeline.append({"program": st.index, "npus": st.npus, "op": op,
                                  "start": np.broadcast_to(np.asarray(
                                      st.start[op.id], np.float64), st.npus.shape),
                                  "end": np.broadcast_to(end, st.npus.shape)})
        for user in st.users[op.id]:
            st.remaining[user] -= 1
            if st.remaining[user] == 0:
                self._make_ready(st, st.ops[user])
        if st.on_finish is not None and len(st.end) == len(st.ops):
            st.on_finish(st.times.peak(end))

    # ------------------------------------------------------------------ op kinds
    def _start(self, st: ProgramState, op: Op, t: float) -> None:
        ready = st.ready[op.id]
        st.start[op.id] = ready
        if op.kind == "compute":
            self._compute(st, op, ready)
        elif op.kind == "memory":
            end = st.times.from_array(self.memory.serve(
                st.rep, st.times.as_array(ready), float(op.size), op.remote))
            st.times.raise_to(self.accounts.local_end, end)
            self._complete(st, op, end)
        elif op.kind == "collective":
            if self.streams is not None and st.inflight >= self.streams:
                st.waiting.append(op)
            else:
                self._arrive(st, op, t)
        elif op.kind == "send":
            self.p2p.send(st, op, t)
        else:
            self.p2p.recv(st, op)

    def _compute(self, st: ProgramState, op: Op, ready: Times) -> None:
        if op.host:
            self._host(st, op, ready)
            return
        tv = st.times
        durations = self._duration(st, op) / st.speed
        free = tv.read(self.compute_free)
        if op.id in st.waits:
            self.accounts.exposure(st, op, free)
        start = tv.maximum(ready, free)
        st.start[op.id] = start
        end = start + durations
        tv.write(self.compute_free, end)
        tv.raise_to(self.accounts.local_end, end)
        self.accounts.compute(st, op, durations)
        self._complete(st, op, end)

    def _duration(self, st: ProgramState, op: Op) -> float:
        """A compute or host op's time at speed 1: given, or priced from its kernels (a
        device op's also from its FLOPs and bytes; a host op's never on the device)."""
        if op.duration_ns == 0.0 and self.compute is not None and (op.kernels or not op.host):
            return compute_op_ns(op, self.compute, self._priced, st.program.source)
        return op.duration_ns

    def _host(self, st: ProgramState, op: Op, ready: Times) -> None:
        """A host op: one at a time per NPU on its host, beside the device's compute (as
        ASTRA-sim's CPU slot), for its traced duration or its kernels' (copies to and from
        host memory: activation offloading's copy stream); not device compute time."""
        st.waits.pop(op.id, None)
        tv = st.times
        start = tv.maximum(ready, tv.read(self.host_free))
        st.start[op.id] = start
        end = start + self._duration(st, op)
        tv.write(self.host_free, end)
        tv.raise_to(self.accounts.local_end, end)
        self._complete(st, op, end)

    # collectives
    def _arrive(self, st: ProgramState, op: Op, t: float) -> None:
        """An op reaches a collective; issue it once every NPU taking part has."""
        st.inflight += 1
        if st.npus.size > 1 or self.programs == 1:
            self._issue(op, [(st, op)], t, st.scope)
            return
        # one-NPU programs: the k-th op on a communicator meets its peers' k-th
        for first, members, scope in self.rendezvous.arrive(st, op):
            self._issue(first, members, t, scope)

    def _issue(self, op: Op, members: list[tuple[ProgramState, Op]], t: float,
               scope: tuple[int, ...]) -> None:
        chunks = collective_chunks(self.net, self.system, op, scope, self._phase_cache)
        self.collectives += 1

        def done(t_end: float) -> None:
            for st, member in members:
                st.inflight -= 1
                end = st.times.full(t_end)
                # a collective that never ran (no dimension left) has no update delay either
                seen = end + (member.update_delay_ns if any(chunks) else 0.0)
                self.accounts.charge(self.accounts.layer_comm, st, member,
                                     float(st.times.first(seen) - t) * st.npus.size)
                self._complete(st, member, end, seen)
                if st.waiting:
                    self._arrive(st, st.waiting.popleft(), t_end)

        custom = dict(self.system.custom).get(op.collective)
        if custom is not None:
            issue_custom(self, op, custom, t, done)
            return
        if not any(chunks):
            done(t)
            return
        policy = None if op.priority == "default" else op.priority
        self.schedule.issue(chunks, at=t, on_done=done, policy=policy)

    # ------------------------------------------------------------------ the end
    def _check_finished(self) -> None:
        self.p2p.check_all_received()
        error = deadlock_error(self.states, self.programs, self.rendezvous, peers)
        if error is not None:
            raise error

    def _record(self) -> RunRecord:
        accounts, sched = self.accounts, self.schedule
        accounts.expand_uniform(self.states)
        time_ns = max(float(accounts.npu_finish.max(initial=0.0)),
                      max(sched.ledger.collective_end.values(), default=0.0))
        return accounts.record(
            time_ns=time_ns, dim_bytes=sched.ledger.dim_bytes.copy(),
            layer_npus=layer_npus(accounts.layer_programs,
                                  [st.npus for st in self.states]),
            dim_busy_ns=sched.ledger.dim_busy_ns(), collectives=self.collectives,
            messages=self.p2p.messages, stats=sched.timer.stats(), timeline=self.timeline)


def run_workload(network, workload: Workload, system: SystemConfig, model: str, *,
                 compiled: bool = True, symmetry: bool = True, **options) -> RunRecord:
    """Run ``workload`` to completion (see :class:`WorkloadEngine`); the analytical model
    runs in the compiled loop of :mod:`.analytical_loop` where it can, the flow model on the
    quotient of the run's symmetries (:mod:`.quotient`) where it has some (``symmetry``;
    results equal to the last rounding; off: every flow, for checks)."""
    if model == "analytical" and compiled:
        from .analytical_loop import run_compiled

        record = run_compiled(network, workload, system, **options)
        if record is not None:
            return record
    # (a timeline keeps op times per program, which the quotient leaves as they are)
    symmetric = symmetry and model == "flow" and options.get("replay", True) and \
        symmetric_system(system)
    exclude: frozenset[int] = frozenset()
    while symmetric:
        quotient = find_quotient(network, workload, options["speed"], exclude)
        if quotient is None:
            break
        try:
            return WorkloadEngine(network, workload, system, model, quotient=quotient,
                                  **options).run()
        except SymmetryBroken as broken:   # start again without those symmetries
            if broken.dims is None:
                break
            exclude |= broken.dims
    return WorkloadEngine(network, workload, system, model, **options).run()

