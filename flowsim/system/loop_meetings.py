"""Where per-rank programs meet, packed for the compiled analytical loop.

A trace gives one program per rank; their collectives meet as
:class:`~.rendezvous.CollectiveRendezvous` matches them: per communicator (an explicit group,
or a set of dimensions, which all programs share), the k-th collective of each rank in
ascending node id. That depends on node order only, so the instances, their members,
shape, scope and priority are known before the run; the loop counts arrivals.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import loop_codes as code


def policy_code(name: str) -> int:
    """The loop's code of a scheduling policy, read as the scheduler reads it (``highest``,
    ``LIFO``, anything else counting down as FIFO)."""
    return code.HIGHEST if name == "highest" else code.LIFO if name == "LIFO" else code.FIFO


def no_meetings(n_ops: int) -> tuple:
    """The meeting arrays of a run whose programs issue their own collectives."""
    none = np.zeros(0, np.int64)
    return (np.full(n_ops, -1, np.int64), np.zeros(1, np.int64), none, none, none,
            np.zeros(1, np.int64), np.zeros(0, np.bool_))


def pack_meetings(shape_of: Callable[[object, tuple[int, ...]], int | None],
                  default_policy: str, npus: int, orders: list[list], offsets: list[int],
                  programs: list[np.ndarray], si: np.ndarray) -> tuple | None:
    """Where one-NPU programs meet (:class:`~.rendezvous.CollectiveRendezvous`): per
    communicator (an explicit group, or a set of dimensions, which all programs share), the
    k-th collective of each rank in ascending node id is one instance (``shape_of(op,
    scope)``: a collective's shape index; ``npus``: the network's). Returns the op's
    instance (-1: none), the instances' member slots (CSR), communicator, shape and
    priority, the communicators' instances (CSR) and whether each issues in order (every
    member's node order is an issue order); ``None`` when an instance can never be complete
    or its members disagree (the Python engine reports it)."""
    slots: dict[tuple, list[list[int]]] = {}
    for order, offset in zip(orders, offsets):
        seen: dict[tuple, int] = {}
        for _, k in sorted((op.id, k) for k, op in enumerate(order)
                           if op.kind == "collective"):
            op = order[k]
            comm = ("group", op.group) if op.group else ("dims", op.dims)
            j = seen[comm] = seen.get(comm, -1) + 1
            instances = slots.setdefault(comm, [])
            if j == len(instances):
                instances.append([])
            instances[j].append(offset + k)
    ops = [op for order in orders for op in order]
    in_order = [all(d < o.id for o in order for d in (*o.deps, *o.ctrl_deps))
                for order in orders]
    inst_of = np.full(len(ops), -1, np.int64)
    sizes: list[int] = []
    comm_of: list[int] = []
    shapes: list[int] = []
    policies: list[int] = []
    comm_ptr, ordered = [0], []
    for c, (comm, instances) in enumerate(slots.items()):
        need = len(comm[1]) if comm[0] == "group" else len(programs)
        for members in instances:
            first = ops[members[0]]
            if len(members) != need or any(
                    (ops[g].collective, ops[g].size, ops[g].priority) !=
                    (first.collective, first.size, first.priority) for g in members):
                return None
            whole = comm[0] == "group" or need == npus
            shape = shape_of(first, () if whole else tuple(sorted(
                int(programs[si[code.PROGRAM, g]][0]) for g in members)))
            if shape is None:
                return None
            inst_of[members] = len(shapes)
            sizes.append(need)
            comm_of.append(c)
            shapes.append(shape)
            policies.append(policy_code(default_policy if first.priority == "default"
                                        else first.priority))
        comm_ptr.append(len(shapes))
        ordered.append(all(in_order[si[code.PROGRAM, g]] for g in instances[0]))
    inst_ptr = np.zeros(len(sizes) + 1, np.int64)
    inst_ptr[1:] = np.cumsum(sizes)
    return (inst_of, inst_ptr, np.array(comm_of, np.int64), np.array(shapes, np.int64),
            np.array(policies, np.int64), np.array(comm_ptr, np.int64),
            np.array(ordered, np.bool_))
