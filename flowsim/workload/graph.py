"""The workload layer's one graph model: ops with dependencies, run by programs of NPUs.

A :class:`Workload` is a list of :class:`Program`: a graph of :class:`Op` and the NPUs that run
it. The common case is SPMD (one program run by every NPU, so a graph scales to any NPU count
without per-rank files); a Chakra trace gives one program per NPU; a pipeline-parallel
generator gives one program per pipeline stage.

Op kinds
--------
``compute``
    Takes the NPU's compute resource (one compute op at a time per NPU) for ``duration_ns``, or
    for the roofline time of ``flops`` and ``mem_bytes`` when a compute model is given.
``collective``
    ``collective`` (canonical type) of ``size`` bytes over ``dims`` (the groups of NPUs that
    differ only in those dimensions, like Chakra's ``involved_dim``) or over an explicit
    ``group`` of NPU ids. Every NPU of the program issues it; one instance covers all groups.
``send`` / ``recv``
    Point-to-point: ``peer`` is an NPU id in a one-NPU program, or an offset added to every
    NPU of the program (``peer_offset``); a send matches the recv of the same ``tag`` posted
    by its peer for it, in order.
``memory``
    A load or store of ``size`` bytes to local or remote (``remote=True``) memory.

Dependencies: ``deps`` are data dependencies (the op waits for them to finish; a collective's
finish includes its ``update_delay_ns``); ``ctrl_deps`` are control dependencies, after which
the op waits a further ``gap_ns`` (ASTRA-sim 1.0's one-cycle state transitions).
Waiting for communication beyond the control-ready time is what flowsim reports as exposed
communication, charged to the layer and pass (``fwd``/``ig``/``wg``) of the op waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._validate import choices_of
from ..errors import ConfigError

OpKind = Literal["compute", "collective", "send", "recv", "memory"]
OP_KINDS: tuple[OpKind, ...] = choices_of(OpKind)
#: The training-loop passes of the per-layer breakdown (ASTRA-sim 1.0's EndToEnd.csv).
Pass = Literal["fwd", "ig", "wg"]
PASSES: tuple[Pass, ...] = choices_of(Pass)
#: Collective priorities: the system's scheduling policy, or an explicit one.
Priority = Literal["default", "LIFO", "FIFO", "highest"]
PRIORITIES: tuple[Priority, ...] = choices_of(Priority)


@dataclass(eq=False)
class Op:
    """One node of a workload graph (see the module docstring for the kinds).

    Attributes
    ----------
    id : int
        Unique within its graph.
    kind : str
        One of :data:`OP_KINDS`.
    name : str
    duration_ns : float
        Compute time at speed factor 1 (``compute``), or the fixed part of a memory access.
    flops, mem_bytes : float
        Work of a compute op for the roofline (used when ``duration_ns`` is 0 and the run has
        a compute model).
    collective : str
        Canonical collective type (``all_reduce``, ...).
    size : int
        Bytes of a collective (per-NPU buffer; per-NPU input for all-gather), a message or a
        memory access.
    dims : tuple of int or None
        Dimensions a collective spans (``None``: all).
    group : tuple of int
        Explicit communicator (NPU ids); empty: ``dims``.
    peer : int or None
        Absolute peer NPU of a send or recv (one-NPU programs).
    peer_offset : int or None
        Peer as ``npu + peer_offset`` for every NPU of the program.
    tag : int
        Matches sends with recvs.
    remote : bool
        A memory op on remote (disaggregated) memory.
    deps, ctrl_deps : tuple of int
        Data and control dependencies (op ids of the same graph).
    gap_ns : float
        Delay after the control dependencies before the op may start.
    update_delay_ns : float
        Added to a collective's finish as seen by the ops that wait for it.
    priority : str
        One of :data:`PRIORITIES`.
    layer : int
        Index into the workload's ``layers`` (-1: none).
    pass_ : str
        ``fwd``, ``ig``, ``wg`` or ``""``.
    kernels : tuple of kernels
        What a compute op does, as kernel shapes (:mod:`flowsim.workload.kernels`) a compute
        model prices when ``duration_ns`` is 0; ``flops`` / ``mem_bytes`` then count their
        totals for reporting.
    host : bool
        A compute op of the host CPU (a Chakra ``is_cpu_op`` node): it runs for
        ``duration_ns`` on its NPU's host resource, one host op at a time, beside the device's
        compute; it is not device compute time.
    """

    id: int
    kind: str
    name: str = ""
    duration_ns: float = 0.0
    flops: float = 0.0
    mem_bytes: float = 0.0
    collective: str = ""
    size: int = 0
    dims: tuple[int, ...] | None = None
    group: tuple[int, ...] = ()
    peer: int | None = None
    peer_offset: int | None = None
    tag: int = 0
    remote: bool = False
    deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    gap_ns: float = 0.0
    update_delay_ns: float = 0.0
    priority: str = "default"
    layer: int = -1
    pass_: str = ""
    kernels: tuple = ()
    host: bool = False


@dataclass(eq=False)
class Program:
    """A graph of ops and the NPUs that each run it.

    Attributes
    ----------
    ops : list of Op
        In any order; ids unique.
    npus : numpy.ndarray of int64
        NPU ids running this graph.
    source : str
        Where the graph came from, for error messages.
    """

    ops: list[Op]
    npus: np.ndarray
    source: str = "<graph>"

    def __post_init__(self) -> None:
        self.npus = np.asarray(self.npus, dtype=np.int64).ravel()


@dataclass(eq=False)
class Workload:
    """Programs covering the NPUs of a network (each NPU in at most one program).

    Attributes
    ----------
    programs : list of Program
    layers : list of str
        Layer names for the per-layer breakdown.
    name : str
    network : NetworkConfig or None
        See below.
    """

    programs: list[Program]
    layers: list[str] = field(default_factory=list)
    name: str = "workload"
    #: the config of the network the programs were written for, when it is not the one they
    #: were loaded for (ASTRA-sim 1.0's ``HYBRID_TRANSFORMER`` splits a dimension in two);
    #: ``None``: the network given
    network: Any = None
    #: the compute model the workload's kernels are priced with unless the simulation is
    #: given one: a device preset name (:mod:`flowsim.compute`) or a Roofline; ``None``: none
    compute: Any = None
    #: the compute model when neither the simulation, :attr:`compute` nor the network names
    #: one (the transformer generator's A100-like roofline); ``None``: none
    fallback_compute: Any = None
    #: model FLOPs of one iteration (Megatron-LM's count, see :mod:`flowsim.workload.flops`),
    #: when the workload knows its model (the transformer generator); ``None``: unknown
    model_flops: float | None = None
    #: bytes of device memory per NPU at the peak, on the fullest pipeline stage: ``weights``,
    #: ``gradients``, ``optimizer``, ``activations``, ``total`` and that ``stage``, when the
    #: workload knows its model (the transformer generator); ``None``: unknown
    memory: dict[str, float] | None = None
    #: the parallel layout in one line (the transformer generator's degrees, schedule and
    #: micro-batches), for the run's summary; ``""``: none to tell
    layout: str = ""
    #: the config of the network the workload was built for (:func:`~.load.load_workload`
    #: sets it): its programs' NPUs and :attr:`network` were made for that network;
    #: ``None``: not recorded
    built_for: Any = None


def spmd(ops: Sequence[Op], npus: int, *, layers: Sequence[str] = (), name: str = "workload",
         source: str = "<graph>") -> Workload:
    """A workload in which every one of ``npus`` NPUs runs the same graph."""
    return Workload([Program(list(ops), np.arange(npus), source)], list(layers), name)


def topological_order(program: Program) -> list[Op]:
    """The program's ops in a dependency-respecting order (ties by id).

    Raises
    ------
    ConfigError
        A dependency names an op that does not exist, an id repeats, or the dependencies form
        a cycle (the message names the ops on it).
    """
    if _in_id_order(program.ops):   # generators' programs: the id order is the order
        return list(program.ops)
    by_id: dict[int, Op] = {}
    for op in program.ops:
        if op.id in by_id:
            raise ConfigError(f"{program.source}: node id {op.id} appears twice")
        by_id[op.id] = op
    indegree = {op.id: 0 for op in program.ops}
    users: dict[int, list[int]] = {op.id: [] for op in program.ops}
    for op in program.ops:
        for dep in {*op.deps, *op.ctrl_deps}:
            if dep not in by_id:
                raise ConfigError(f"{program.source}: node {op.id} ({op.name or op.kind}) "
                                  f"depends on node {dep}, which does not exist")
            indegree[op.id] += 1
            users[dep].append(op.id)
    import heapq

    ready = [i for i, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(by_id[i])
        for user in users[i]:
            indegree[user] -= 1
            if indegree[user] == 0:
                heapq.heappush(ready, user)
    if len(order) < len(program.ops):
        stuck = sorted(i for i, n in indegree.items() if n > 0)
        raise ConfigError(f"{program.source}: dependency cycle among nodes "
                          f"{_some(stuck)}")
    return order


def _in_id_order(ops: Sequence[Op]) -> bool:
    """Whether the ops' ids are their positions and every dependency is an earlier op (a
    plain int): then the smallest ready id is always the next position, so
    :func:`topological_order` is the list itself (and there is no cycle, repeat or missing
    dependency to report). Anything else, odd types included, takes the general path and
    its messages."""
    for i, op in enumerate(ops):
        if op.id != i:
            return False
        for d in (*op.deps, *op.ctrl_deps):
            if type(d) is not int or not 0 <= d < i:
                return False
    return True


def _some(ids: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
