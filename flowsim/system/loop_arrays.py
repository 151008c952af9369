"""The arrays of the compiled analytical loop (:mod:`._loop_kernels`) from a workload.

:func:`pack` turns a run's programs into op tables (kind, program, position, layer row and
pass column, collective shape, priority, mailbox, size; duration, control gap, update delay,
message time), dependency CSRs and their dependants, and per collective shape its chunks'
phases (queue, step delays and lengths, bytes per dimension), resolved with the scheduler's
own :class:`~.shapes.PhaseShapes` and :class:`~.point_to_point.PointToPoint` so that every
number is the one the Python engine computes. ``None`` for an op the loop does not take.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from ..collectives import base_algorithm
from ..workload.graph import PASSES, Workload, topological_order
from . import loop_codes as code
from .config import SystemConfig
from .loop_meetings import no_meetings, pack_meetings, policy_code
from .op_prices import compute_op_ns
from .phases import NpuSet, collective_chunks
from .point_to_point import PointToPoint, mailbox_key
from .scheduler import Schedule
from .templates import StepTemplate

_KINDS = {"compute": code.COMPUTE, "collective": code.COLLECTIVE, "send": code.SEND,
          "recv": code.RECV}


_PASS_COLUMN = {name: k for k, name in enumerate(PASSES)}


class Packer:
    """Collects the per-shape, per-phase, per-queue and per-mailbox tables of a run, with
    the scheduler and point-to-point objects that price them."""

    def __init__(self, network, system: SystemConfig, programs: list[np.ndarray]) -> None:
        self.network, self.system = network, system
        replicable = network.replicable and system.synchronization == "barrier"
        self.schedule = Schedule(network, system, "analytical", replicate=replicable,
                                 npu_finish=False)
        self.p2p = PointToPoint(self.schedule, system.endpoint_delay_ns, lambda *a: None)
        self.scopes = [() if npus.size == network.npus else NpuSet(int(n) for n in npus)
                       for npus in programs]
        self.phase_cache: dict[tuple, list] = {}
        self.shape_of: dict[int, int] = {}     # id(chunks) -> shape
        self.shape_chunks: list[list[list[int]]] = []
        #: flows timed, flows they stand for, steps, phases
        self.shape_stats: list[tuple[int, int, int, int]] = []
        self.phase_of: dict[tuple, int] = {}   # (id(plan), queue, dims, members) -> phase
        self.phase_queue: list[int] = []
        self.phase_steps: list[list[float]] = []
        self.phase_delays: list[list[float]] = []
        self.phase_dim_bytes: list[np.ndarray] = []
        self.phase_dims: list[tuple[int, ...]] = []
        self.queues: dict[tuple, int] = {}
        self.queue_uses: list[int] = []
        self.boxes: dict[tuple, int] = {}
        self.box_sends: list[int] = []
        self.box_recvs: list[int] = []

    def shape(self, op, scope: tuple[int, ...]) -> int | None:
        """The shape index of collective ``op`` issued by the NPUs ``scope`` (empty: all);
        ``None``: a phase the loop cannot time."""
        chunks = collective_chunks(self.network, self.system, op, scope, self.phase_cache)
        s = self.shape_of.get(id(chunks))
        if s is not None:
            return s
        if any(base_algorithm(ph.algorithm).per_npu_only for c in chunks for ph in c):
            return None
        lists, flows, represented, steps, phases = [], 0, 0, 0, 0
        if any(chunks):   # else the collective is done when issued
            for phases_of_chunk in chunks:
                lists.append([self._phase(ph) for ph in phases_of_chunk])
                for ph in phases_of_chunk:
                    for template, _, count in self.schedule.shapes.plan(ph).usage:
                        flows += template.flows * count
                        represented += template.represented_flows * count
                        steps += count
                phases += len(phases_of_chunk)
        s = self.shape_of[id(chunks)] = len(self.shape_chunks)
        self.shape_chunks.append(lists)
        self.shape_stats.append((flows, represented, steps, phases))
        return s

    def _phase(self, phase) -> int:
        shapes = self.schedule.shapes
        plan = shapes.plan(phase)
        queue = self.queues.setdefault(phase.queue, len(self.queues))
        key = (id(plan), queue, phase.dims, phase.members)
        index = self.phase_of.get(key)
        if index is None:
            index = self.phase_of[key] = len(self.phase_queue)
            self.phase_queue.append(queue)
            self.phase_steps.append([tp.duration(size)
                                     for tp, size in zip(plan.templates, plan.sizes)])
            self.phase_delays.append(list(plan.delays))
            self.phase_dim_bytes.append(np.broadcast_to(plan.dim_bytes,
                                                        (self.network.ndims,)))
            self.phase_dims.append(tuple(shapes.dims_used(phase)))
        return index

    def count_queue_uses(self, shape: int, times: int) -> None:
        """Reserve queue room for ``times`` collectives of ``shape``."""
        for chunk in self.shape_chunks[shape]:
            for ph in chunk:
                self.queue_uses[self.phase_queue[ph]] += times

    def mailbox(self, npus: np.ndarray, op, sending: bool) -> int:
        """The mailbox a send or recv of the program on ``npus`` meets in (counted)."""
        box = self.boxes.setdefault(mailbox_key(npus, op, sending=sending), len(self.boxes))
        if box == len(self.box_sends):
            self.box_sends.append(0)
            self.box_recvs.append(0)
        (self.box_sends if sending else self.box_recvs)[box] += 1
        return box


@dataclass
class Packed:
    """A packed run: :func:`~._loop_kernels.run_loop`'s arguments, and what its record
    needs."""

    arrays: tuple
    sizes: tuple
    packer: Packer
    #: the int op table (rows: :mod:`.loop_codes`' columns, one column per op)
    si: np.ndarray
    #: the shape of every collective issued (a program's own, then the meetings)
    collectives: np.ndarray
    #: (op, message template) of every send
    sends: list[tuple[int, StepTemplate]]


def pack(network, workload: Workload, system: SystemConfig, programs: list[np.ndarray],
         speed: np.ndarray, compute) -> Packed | None:
    """The run packed for :func:`~._loop_kernels.run_loop`; ``None`` for an op the loop does
    not take. ``programs``: each program's NPUs, sorted; ``speed``: per NPU."""
    packer = Packer(network, system, programs)
    n_rows = len(workload.layers) + 1
    columns = []
    sends: list[tuple[int, StepTemplate]] = []
    offsets = [0]
    # one-NPU programs (traces of ranks) meet in their collectives (rendezvous.py)
    meeting = len(programs) > 1 and all(npus.size == 1 for npus in programs)
    for p, (program, npus) in enumerate(zip(workload.programs, programs)):
        packed = _pack_program(packer, p, program, npus, offsets[-1], float(speed[npus[0]]),
                               compute, n_rows, sends, meeting)
        if packed is None:
            return None
        columns.append(packed)
        offsets.append(offsets[-1] + packed[0].shape[1])
    si, sf = (np.concatenate([c[k] for c in columns], axis=1) for k in (0, 1))
    message_dim_bytes = np.concatenate([c[2] for c in columns])
    dep_ptr, dep_idx = _csr_of([c[3] for c in columns], [c[4] for c in columns])
    ctrl_ptr, ctrl_idx = _csr_of([c[5] for c in columns], [c[6] for c in columns])
    user_ptr, user_idx, remaining = _users(dep_ptr, dep_idx, ctrl_ptr, ctrl_idx)
    meetings = pack_meetings(packer.shape, system.scheduling_policy, network.npus,
                             [c[7] for c in columns], offsets, programs, si) \
        if meeting else no_meetings(si.shape[1])
    if meetings is None:
        return None
    packer.queue_uses = [0] * len(packer.queues)
    own = si[code.SHAPE][si[code.KIND] == code.COLLECTIVE] if not meeting else []
    collectives = np.concatenate([own, meetings[3]]).astype(np.int64)   # every one issued
    for shape, count in zip(*np.unique(collectives, return_counts=True)):
        packer.count_queue_uses(int(shape), int(count))
    arrays, sizes = _arrays(packer, si, sf, (dep_ptr, dep_idx, ctrl_ptr, ctrl_idx, user_ptr,
                                             user_idx, remaining), programs,
                            message_dim_bytes, collectives, len(sends), n_rows, meetings)
    return Packed(arrays, sizes, packer, si, collectives, sends)


def _pack_program(packer: Packer, p: int, program, npus: np.ndarray, offset: int,
                  npu_speed: float, compute, n_rows: int, sends: list, meeting: bool):
    """One program's columns: int and float op tables, message bytes per dimension, and
    its data and control dependencies (lengths, global op indices)."""
    order, deps, ctrls = _ordered(program)
    n = len(order)
    kinds = np.fromiter(map(_KINDS.get, map(attrgetter("kind"), order), repeat(-1)),
                        np.int64, n)
    if np.any(kinds < 0) or any(map(attrgetter("host"), order)):
        return None
    si = np.zeros((code.OP_INTS, n), np.int64)
    sf = np.zeros((code.OP_FLOATS, n))
    si[code.KIND], si[code.PROGRAM], si[code.ORDER] = kinds, p, np.arange(n)
    try:
        layer = np.fromiter(map(attrgetter("layer"), order), np.int64, n)
        si[code.SIZE] = np.fromiter(map(attrgetter("size"), order), np.int64, n)
    except OverflowError:   # beyond 64-bit integers: the engine's Python integers take it
        return None
    if np.any(layer >= n_rows - 1):   # a layer the workload does not name
        return None
    si[code.ROW] = np.where(layer >= 0, layer, n_rows - 1)
    si[code.COL] = np.fromiter(map(_PASS_COLUMN.get, map(attrgetter("pass_"), order),
                                   repeat(0)), np.int64, n)
    sf[code.GAP] = np.fromiter(map(attrgetter("gap_ns"), order), np.float64, n)
    sf[code.UPDATE_DELAY] = np.fromiter(map(attrgetter("update_delay_ns"), order), np.float64, n)
    computes = np.flatnonzero(kinds == code.COMPUTE)
    sf[code.DURATION, computes] = np.array(
        _compute_ns([order[k] for k in computes.tolist()], compute, program.source),
        np.float64) / npu_speed
    collectives = np.flatnonzero(kinds == code.COLLECTIVE) if not meeting \
        else np.zeros(0, np.int64)
    keys = [(op.collective, op.size, op.dims, op.group)
            for op in (order[k] for k in collectives.tolist())]
    shapes: dict[tuple, int] = {}
    for k, key in zip(collectives.tolist(), keys):
        if key not in shapes:
            shape = packer.shape(order[k], packer.scopes[p])
            if shape is None:
                return None
            shapes[key] = shape
    si[code.SHAPE, collectives] = [shapes[key] for key in keys]
    default_policy = policy_code(packer.system.scheduling_policy)
    si[code.POLICY, collectives] = [default_policy if order[k].priority == "default"
                                    else policy_code(order[k].priority)
                                    for k in collectives.tolist()]
    message_dim_bytes = np.zeros((n, packer.network.ndims))
    messages = np.flatnonzero((kinds == code.SEND) | (kinds == code.RECV))
    si[code.MAILBOX, messages] = [
        packer.mailbox(npus, order[k], kind == code.SEND)
        for k, kind in zip(messages.tolist(), kinds[messages].tolist())]
    posts = messages[kinds[messages] == code.SEND].tolist()
    if posts:
        ops = [order[k] for k in posts]
        templates = [packer.p2p.route(npus, op) for op in ops]
        sizes = [float(op.size) for op in ops]
        sf[code.MESSAGE_NS, posts] = [t.duration(size) for t, size in zip(templates, sizes)]
        message_dim_bytes[posts] = np.array(
            [packer.schedule.shapes.dim_bytes_per_byte(t) for t in templates]) * \
            np.array(sizes)[:, None]
        sends.extend(zip([offset + k for k in posts], templates))
    return (si, sf, message_dim_bytes, deps[0], deps[1] + offset, ctrls[0],
            ctrls[1] + offset, order)


def _ordered(program) -> tuple[list, tuple[np.ndarray, np.ndarray],
                               tuple[np.ndarray, np.ndarray]]:
    """The program's ops in :func:`topological_order` and their data and control
    dependencies as (lengths, positions). A generator's ops are in that order already (ids
    are positions, dependencies point earlier): checked here on arrays."""
    ops = program.ops
    if list(map(attrgetter("id"), ops)) == list(range(len(ops))):
        deps = _flat(list(map(attrgetter("deps"), ops)))
        ctrls = _flat(list(map(attrgetter("ctrl_deps"), ops)))
        if _earlier(*deps) and _earlier(*ctrls):
            return ops, deps, ctrls
    order = topological_order(program)
    positions = {op.id: k for k, op in enumerate(order)}
    return (order, _flat([[positions[d] for d in op.deps] for op in order]),
            _flat([[positions[d] for d in op.ctrl_deps] for op in order]))


def _flat(lists: list) -> tuple[np.ndarray, np.ndarray]:
    return (np.fromiter(map(len, lists), np.int64, len(lists)),
            np.fromiter(chain.from_iterable(lists), np.int64))


def _earlier(lengths: np.ndarray, flat: np.ndarray) -> bool:
    """Whether every dependency points to an earlier op."""
    return bool(np.all(flat < np.repeat(np.arange(lengths.size), lengths)))


def _compute_ns(ops: list, compute, where: str) -> list[float]:
    """Compute ops' times at speed 1: traced, else priced once per kernels tuple (errors
    name ``where``, the program)."""
    durations = [op.duration_ns for op in ops]
    if compute is None:
        return durations
    priced: dict[int, tuple[tuple, float]] = {}
    return [d if d != 0.0 else compute_op_ns(op, compute, priced, where)
            for d, op in zip(durations, ops)]


def _csr_of(lengths: list[np.ndarray], flats: list[np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    """A CSR of the concatenated per-op lists."""
    ptr = np.zeros(sum(x.size for x in lengths) + 1, np.int64)
    np.cumsum(np.concatenate(lengths), out=ptr[1:])
    return ptr, np.concatenate(flats)


def _users(dep_ptr, dep_idx, ctrl_ptr, ctrl_idx):
    """Every op's dependants (its data and control dependencies counted once) and how many
    dependencies each op waits for."""
    n = dep_ptr.size - 1
    user = np.concatenate([np.repeat(np.arange(n), np.diff(dep_ptr)),
                           np.repeat(np.arange(n), np.diff(ctrl_ptr))])
    edges = np.unique(user * n + np.concatenate([dep_idx, ctrl_idx]))
    user, dep = edges // n, edges % n
    remaining = np.bincount(user, minlength=n).astype(np.int64)
    by_dep = np.argsort(dep, kind="stable")
    user_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dep, minlength=n), out=user_ptr[1:])
    return user_ptr, user[by_dep].astype(np.int64), remaining


def _csr(lists: list[list]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    return ptr, np.array([v for x in lists for v in x], np.int64)


def _arrays(packer: Packer, si, sf, graph, programs, message_dim_bytes, collectives,
            n_sends: int, n_rows: int, meetings: tuple):
    """The arguments of :func:`~._loop_kernels.run_loop`: its arrays, then its sizes."""
    chunk_lists = [chunk for lists in packer.shape_chunks for chunk in lists]
    shape_chunk_ptr = np.zeros(len(packer.shape_chunks) + 1, np.int64)
    shape_chunk_ptr[1:] = np.cumsum([len(lists) for lists in packer.shape_chunks])
    chunk_phase_ptr, chunk_phases = _csr(chunk_lists)
    phase_step_ptr = np.zeros(len(packer.phase_steps) + 1, np.int64)
    phase_step_ptr[1:] = np.cumsum([len(s) for s in packer.phase_steps])
    step_ns = np.array([v for s in packer.phase_steps for v in s], np.float64)
    step_delay = np.array([v for s in packer.phase_delays for v in s], np.float64)
    phase_dim_bytes = np.array(packer.phase_dim_bytes, np.float64).reshape(
        -1, packer.network.ndims)
    queue_ptr = np.zeros(len(packer.queue_uses) + 1, np.int64)
    queue_ptr[1:] = np.cumsum(packer.queue_uses)
    mail_ptr = np.zeros(len(packer.box_sends) + 1, np.int64)
    mail_ptr[1:] = np.cumsum(np.maximum(packer.box_sends, packer.box_recvs))
    stats = np.array(packer.shape_stats, np.int64).reshape(-1, 4)
    nonempty = np.array([sum(1 for c in lists if c) for lists in packer.shape_chunks],
                        np.int64)
    n_chunk_instances = int(nonempty[collectives].sum()) if collectives.size else 0
    n_events = int(stats[collectives, 3].sum() if collectives.size else 0) + n_sends
    prog_npu = np.array([int(npus[0]) for npus in programs], np.int64)
    prog_size = np.array([npus.size for npus in programs], np.int64)
    arrays = (np.ascontiguousarray(si.T), np.ascontiguousarray(sf.T), *graph, prog_npu,
              prog_size, message_dim_bytes, mail_ptr,
              float(packer.system.endpoint_delay_ns), shape_chunk_ptr, chunk_phase_ptr,
              chunk_phases, np.array(packer.phase_queue, np.int64), phase_step_ptr,
              step_delay, step_ns, phase_dim_bytes, queue_ptr,
              int(packer.system.active_chunks), *meetings)
    sizes = (int(packer.network.npus), n_rows, len(PASSES), max(n_chunk_instances, 1),
             max(n_events, 1))
    return arrays, sizes
