"""Checks of a workload against the network it will run on (the engine trusts them)."""

from __future__ import annotations

import math
import sys

import numpy as np

from ..collectives import COLLECTIVES
from ..errors import ConfigError
from ..topology.load import AnyNetwork
from .graph import OP_KINDS, PRIORITIES, Op, Program, Workload, topological_order

#: the largest finite float: ``0 <= x <= _FLOAT_MAX`` rejects negatives, infinities and NaN
_FLOAT_MAX = sys.float_info.max


def _where(program: Program, op: Op) -> str:
    return f"{program.source}: node {op.id} ({op.name or op.kind})"


def _error(program: Program, op: Op, message: str) -> ConfigError:
    return ConfigError(f"{_where(program, op)}: {message}")


def check_workload(workload: Workload, network: AnyNetwork, *, roofline: bool = False) -> None:
    """Raise :class:`ConfigError` naming the file and node for anything the engine cannot run.

    Checks: NPUs of programs exist and belong to one program each; op kinds, sizes, durations,
    priorities; collective types, dimensions and groups (ranks inside the network, a program's
    collectives over whole groups of its dimensions); send/recv peers inside the network, and
    every send matched by a recv (same sender, receiver and tag) and vice versa; no missing
    dependency and no cycle.
    """
    # a workload that names its compute model (a generator's device or roofline) has one
    roofline = roofline or workload.compute is not None or \
        workload.fallback_compute is not None
    npus = network.npus
    owner = np.full(npus, -1)
    for k, program in enumerate(workload.programs):
        if program.npus.size == 0:
            raise ConfigError(f"{program.source}: a program without NPUs")
        bad = program.npus[(program.npus < 0) | (program.npus >= npus)]
        if bad.size:
            raise ConfigError(f"{program.source}: NPU {int(bad[0])} is outside the network "
                              f"(0..{npus - 1})")
        taken = owner[program.npus] >= 0
        if taken.any():
            raise ConfigError(f"{program.source}: NPU {int(program.npus[taken][0])} runs two "
                              "programs")
        owner[program.npus] = k
        topological_order(program)
        whole_groups: dict[tuple[int, ...] | None, bool] = {}
        if _columns_valid(program, network, whole_groups, roofline):
            continue
        for op in program.ops:
            _check_op(program, op, network, whole_groups)
            if op.kind == "compute" and not op.duration_ns and (op.flops or op.mem_bytes) \
                    and not roofline:
                raise ConfigError(f"{_where(program, op)}: compute given as FLOPs / bytes needs "
                                  "a roofline or a device to time it: flowsim run --roofline "
                                  "TFLOPS,GBPS[,EFFICIENCY] (e.g. --roofline 312,2039,0.5), or "
                                  "simulate(..., roofline={'peak_tflops': 312, "
                                  "'memory_bandwidth_GBps': 2039, 'efficiency': 0.5}) or "
                                  "simulate(..., device='a100')")
    _check_layers(workload)
    _check_pairs(workload, network)


def _columns_valid(program: Program, network: AnyNetwork,
                   whole_groups: dict[tuple[int, ...] | None, bool], roofline: bool) -> bool:
    """The checks of :func:`_check_op` (and the compute-model one) on the program's columns
    at once, each distinct collective and message checked once: ``True`` when every op
    passes. ``False`` sends the program through the per-op checks, which name the first
    bad op (a 16K-GPU pipeline stage has thousands of ops, of a few dozen shapes)."""
    ops = program.ops
    if not {op.kind for op in ops} <= _OP_KINDS or \
            not {op.priority for op in ops} <= _PRIORITIES:
        return False
    sizes: list[object] = [op.size for op in ops]
    times: list[list[object]] = [[op.duration_ns for op in ops], [op.flops for op in ops],
                                 [op.mem_bytes for op in ops], [op.gap_ns for op in ops],
                                 [op.update_delay_ns for op in ops]]
    if {type(v) for v in sizes} - {int} or \
            any({type(v) for v in values} - {int, float} for values in times):
        return False
    columns = [sizes, *times]
    try:
        amounts = np.array(columns, np.float64)
    except OverflowError:
        return False
    if not np.all((amounts >= 0) & (amounts <= _FLOAT_MAX)):
        return False
    if not roofline and any(op.kind == "compute" and not op.duration_ns
                            and (op.flops or op.mem_bytes) for op in ops):
        return False
    checked = set()
    for op in ops:
        if op.kind in ("collective", "send", "recv"):
            key = (op.kind, op.collective, op.dims, op.group, op.peer, op.peer_offset)
            if key not in checked:
                checked.add(key)
                _check_op(program, op, network, whole_groups)
    return True


_OP_KINDS, _PRIORITIES = frozenset(OP_KINDS), frozenset(PRIORITIES)


def _check_layers(workload: Workload) -> None:
    """Every op's ``layer`` indexes the workload's layers (or is negative: no layer)."""
    n = len(workload.layers)
    named = f"0..{n - 1}, or -1 for none" if n else "it names none: -1"
    for program in workload.programs:
        layers = [op.layer for op in program.ops]
        if {type(v) for v in layers} <= {int} and (not layers or max(layers) < n):
            continue   # the common case, checked at once
        for op, layer in zip(program.ops, layers):
            if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool) \
                    or layer >= n:
                raise _error(program, op, f"layer must index the workload's layers "
                                          f"({named}), found {layer!r}")


def _plain_amounts(op: Op) -> bool:
    """Whether the op's size and times are plain non-negative finite numbers (the common
    case, checked in one pass; anything else goes through :func:`_check_amounts`)."""
    if type(op.size) is not int or op.size < 0:
        return False
    for value in (op.duration_ns, op.flops, op.mem_bytes, op.gap_ns, op.update_delay_ns):
        if type(value) is not float and type(value) is not int or not 0 <= value <= _FLOAT_MAX:
            return False
    return True


def _check_amounts(program: Program, op: Op) -> None:
    """The op's size and times, one by one, naming the first bad one."""
    if not isinstance(op.size, (int, np.integer)) or isinstance(op.size, bool) or op.size < 0:
        raise _error(program, op, f"size must be a non-negative integer (bytes), "
                                  f"found {op.size!r}")
    for name in ("duration_ns", "flops", "mem_bytes", "gap_ns", "update_delay_ns"):
        value = getattr(op, name)
        if not isinstance(value, (int, float, np.number)) or not math.isfinite(value) \
                or value < 0:
            raise _error(program, op, f"{name} must be a non-negative number, found {value!r}")


def _check_op(program: Program, op: Op, network: AnyNetwork,
              whole_groups: dict[tuple[int, ...] | None, bool]) -> None:
    """Check one op; ``whole_groups`` caches, per dims, whether the program holds whole groups
    of them."""
    if op.kind not in OP_KINDS:
        raise _error(program, op, f"kind must be one of {', '.join(OP_KINDS)}, "
                                  f"found {op.kind!r}")
    if not _plain_amounts(op):
        _check_amounts(program, op)
    if op.priority not in PRIORITIES:
        raise _error(program, op, f"priority must be one of {', '.join(PRIORITIES)}, "
                                  f"found {op.priority!r}")
    if op.kind == "collective":
        if op.collective not in COLLECTIVES or op.collective == "send_recv":
            raise _error(program, op, f"unknown collective {op.collective!r}")
        if op.dims is not None:
            bad = [d for d in op.dims if not 0 <= d < network.ndims]
            if bad:
                raise _error(program, op, f"dimension {bad[0]} does not exist (the network "
                                          f"has {network.ndims})")
            if len(set(op.dims)) != len(op.dims):   # as simulate_collective refuses them
                raise _error(program, op, f"dims {list(op.dims)} name a dimension twice: "
                                          "give each once")
        if op.group:
            bad = [r for r in op.group if not 0 <= r < network.npus]
            if bad or len(set(op.group)) != len(op.group) or len(op.group) < 2:
                raise _error(program, op, f"communicator {list(op.group)[:8]} must hold "
                                          f"distinct NPUs of 0..{network.npus - 1}, at least 2")
            # every NPU that runs the op takes part; a multi-NPU program is the whole group
            members = set(op.group)
            npus = set(program.npus.tolist())
            if not npus <= members or (len(npus) > 1 and npus != members):
                raise _error(program, op,
                             f"communicator {sorted(members)[:8]} must be the NPUs that run "
                             f"this op ({sorted(npus)[:8]}): every NPU of a program issues its "
                             "collectives")
        elif program.npus.size > 1 and program.npus.size < network.npus:
            dims = tuple(range(network.ndims)) if op.dims is None else tuple(op.dims)
            whole = whole_groups.get(dims)
            if whole is None:
                groups = network.shared_dim_groups(dims) if dims else np.zeros((0, 1), np.int64)
                inside = np.isin(groups, program.npus)
                whole = whole_groups[dims] = not np.any(inside.any(axis=1) &
                                                        ~inside.all(axis=1))
            if not whole:
                raise _error(program, op, f"the groups of dimensions {list(dims)} reach "
                                          "NPUs outside this program; give an explicit group")
    if op.kind in ("send", "recv"):
        if (op.peer is None) == (op.peer_offset is None):
            raise _error(program, op, f"a {op.kind} needs exactly one of peer, peer_offset")
        if op.peer is not None and program.npus.size != 1:
            raise _error(program, op, "an absolute peer needs a one-NPU program; use "
                                      "peer_offset")
        peers = np.array([op.peer]) if op.peer is not None else program.npus + op.peer_offset
        outside = peers[(peers < 0) | (peers >= network.npus)]
        if outside.size:
            raise _error(program, op, f"peer NPU {int(outside[0])} is outside the network "
                                      f"(0..{network.npus - 1})")
        if np.any(peers == program.npus):
            raise _error(program, op, f"an NPU cannot {op.kind} to itself")


def _pairs_balance_by_program(workload: Workload) -> bool:
    """Whether sends and recvs match program by program: a send of a program with
    ``peer_offset`` o (and tag t) stands for the pairs ``(n, n + o)`` of all its NPUs ``n``;
    a recv with offset -o on the NPUs ``npus + o`` stands for the same pairs. When these
    aggregate keys balance, so do the per-NPU pairs (the converse need not hold: then the
    per-pair check decides). A 16K-NPU pipeline posts ~10^7 pairs but ~10^4 such keys."""
    balance: dict[tuple, int] = {}
    for program in workload.programs:
        # one bytes object per NPU set: it hashes its thousands of ids once, not per op
        shifted: dict[int, bytes] = {}
        for op in program.ops:
            if op.kind not in ("send", "recv"):
                continue
            if op.peer_offset is None:   # an absolute peer: one-NPU programs, checked per pair
                return False
            offset = 0 if op.kind == "send" else op.peer_offset
            npus = shifted.get(offset)
            if npus is None:
                npus = shifted[offset] = (program.npus + offset).tobytes()
            if op.kind == "send":
                key = (npus, op.peer_offset, op.tag)
                balance[key] = balance.get(key, 0) + 1
            else:
                key = (npus, -op.peer_offset, op.tag)
                balance[key] = balance.get(key, 0) - 1
    return not any(balance.values())


def _check_pairs(workload: Workload, network: AnyNetwork) -> None:
    """Every send has a recv posted by its receiver for it, and vice versa (as multisets of
    (sender, receiver, tag), compared with arrays: programs of many NPUs send many)."""
    if _pairs_balance_by_program(workload):
        return
    tags: dict = {}
    columns: list[tuple[np.ndarray, ...]] = []
    places: list[tuple[Program, Op]] = []
    for program in workload.programs:
        for op in program.ops:
            if op.kind not in ("send", "recv"):
                continue
            peers = np.array([op.peer]) if op.peer is not None else \
                program.npus + op.peer_offset
            me = program.npus
            src, dst = (me, peers) if op.kind == "send" else (peers, me)
            n = src.size
            columns.append((src, dst, np.full(n, tags.setdefault(op.tag, len(tags))),
                            np.full(n, 1 if op.kind == "send" else -1),
                            np.full(n, len(places))))
            places.append((program, op))
    if not columns:
        return
    src, dst, tag, sign, place = (np.concatenate(c) for c in zip(*columns))
    order = np.lexsort((tag, dst, src))
    key = np.stack([src[order], dst[order], tag[order]], axis=1)
    new = np.concatenate([[True], np.any(key[1:] != key[:-1], axis=1)])
    balance = np.add.reduceat(sign[order], np.flatnonzero(new))
    bad = np.flatnonzero(balance != 0)
    if not bad.size:
        return
    starts = np.flatnonzero(new)
    k = starts[bad[0]]
    s, d = int(key[k, 0]), int(key[k, 1])
    label = next(t for t, i in tags.items() if i == key[k, 2])
    want = 1 if balance[bad[0]] > 0 else -1   # the side in excess names the message
    row = next(r for r in order[k: starts[bad[0] + 1] if bad[0] + 1 < starts.size else None]
               if sign[r] == want)
    program, op = places[int(place[row])]
    if want > 0:
        raise ConfigError(f"{_where(program, op)}: send from NPU {s} to NPU {d} with tag "
                          f"{label} has no matching recv on NPU {d}")
    raise ConfigError(f"{_where(program, op)}: recv on NPU {d} from NPU {s} with tag "
                      f"{label} has no matching send on NPU {s}")
