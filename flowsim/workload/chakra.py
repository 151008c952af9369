"""Chakra execution traces (``.et``) into and out of flowsim's graph model.

An ``.et`` file is a stream of protobuf messages, each preceded by its length as a varint: one
``GlobalMetadata``, then one ``Node`` per op (decoded by the ``protobuf`` package,
:mod:`.chakra_codec`, with the schema of :mod:`.chakra_schema`). A workload is one file per
NPU, ``<prefix>.<rank>.et`` for rank 0..n-1, as ASTRA-sim 2.x reads them
(``--workload-configuration=<prefix>``), or one rank's file run by every NPU (``spmd=True``,
:mod:`.chakra_spmd`).

Mapping to :class:`~flowsim.workload.graph.Op` (mirroring ASTRA-sim's ``Workload.cc``)
---------------------------------------------------------------------------------------
``COMP_NODE`` -> ``compute``
    **Time unit:** ``duration_micros`` is microseconds, so ``duration_ns = duration_micros *
    1000``. ASTRA-sim's feeder takes its ``runtime()`` from ``duration_micros`` and converts
    with the same factor; a node of zero duration costs it 1 ns, and so here, unless the node
    has ``num_ops`` (then it is left to the compute model: roofline or device).
    ``num_ops`` (FLOPs) and ``tensor_size`` (bytes) go to ``flops`` and ``mem_bytes``.
    ``is_cpu_op`` nodes run on their NPU's host resource (``Op.host``: one host op at a time,
    beside the device's compute, as ASTRA-sim's CPU slot), for their traced duration.
``COMM_COLL_NODE`` -> ``collective``
    ``comm_type`` (``CollectiveCommType``), ``comm_size`` bytes, ``involved_dim`` (bool list:
    the indices of True become ``dims``; absent: all dimensions, ``None``), ``pg_name`` (an id
    of the communicator-group json ``{"<id>": [ranks]}``; ``""`` and ``"0"`` mean all NPUs, as
    in ASTRA-sim). ASTRA-sim simulates only all-reduce, all-gather, reduce-scatter and
    all-to-all (broadcast is replayed for its ``duration_micros``); flowsim also simulates
    ``BROADCAST`` and ``REDUCE`` (Chakra has no root field: the engine's default root) and runs
    ``BARRIER`` as a zero-byte all-reduce (every member waits for all). ``GATHER``,
    ``SCATTER`` and ``REDUCE_SCATTER_BLOCK`` are errors. Ranks pair their collectives per
    communicator in node order (:class:`~flowsim.system.rendezvous.CollectiveRendezvous`).
``COMM_*_NODE`` with ``is_cpu_op`` -> a host ``compute`` op of its traced duration
    PyTorch's host-side ``c10d::*`` wrappers, which Chakra's converter typed as communication
    nodes; the GPU ``ncclKernel`` node each launches (it lists the wrapper's ``(0)`` half in
    its ``data_deps``) carries ``comm_type`` and ``comm_size``. A warning gives their count.
``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` -> ``send`` / ``recv``
    ``peer`` = ``comm_dst`` / ``comm_src``, ``tag`` = ``comm_tag``, ``size`` = ``comm_size``
    (``tensor_size`` when ``comm_size`` is absent, as chakra_generator writes them; a node
    without peer or tag, as chakra_generator's, is an error: nothing says whom it talks to).
``MEM_LOAD_NODE`` / ``MEM_STORE_NODE`` -> ``memory`` of ``tensor_size`` bytes
    ASTRA-sim sends every one to its remote-memory model; ``remote`` is therefore True unless
    ``tensor_loc`` says ``LOCAL_MEMORY`` (1; Chakra's older ``MemoryType``: 0 invalid, 1
    local, 2 remote).
``METADATA_NODE`` / ``INVALID_NODE`` -> a zero-duration ``compute`` op (ASTRA-sim skips them;
    keeping them keeps the dependencies valid).

``data_deps`` become ``deps`` and ``ctrl_deps`` ``ctrl_deps``, except in a file whose
``ctrl_deps`` name absent nodes or the node itself (traces of Chakra's PyTorch converter, whose
``ctrl_deps`` are host-trace parents, dangling and cyclic): all that file's ``ctrl_deps`` are
then ignored, with a warning, and the ``data_deps`` (program order per thread, kernel after
its launch) order the nodes, as Chakra's feeder v2 reads them.

symbolic_tensor_graph's traces (``GlobalMetadata`` attribute ``schema =
"symbolic_tensor_network"``) count differently: ``num_ops`` is multiply-accumulates (2 FLOPs
each) and ``comm_size`` / ``tensor_size`` are element counts (``element_bytes`` each, default 2);
a compute node's memory traffic is its output plus the inputs its ``inputs`` attribute lists.
Their communicator file ``<prefix>.json`` is found by default.

Attributes named ``flowsim_*`` are flowsim's own (ASTRA-sim looks attributes up by name and
ignores them): the exact ``duration_ns`` when it is not a positive whole number of
microseconds, and the op fields Chakra cannot express (``gap_ns``, ``update_delay_ns``,
``priority``, ``layer``, ``pass_``; the layer names in ``GlobalMetadata``), so that
``load_chakra(save_chakra(w))`` gives back the same graph.

Sources of the ASTRA-sim behaviour: ``astra-sim/workload/Workload.cc`` (``issue``,
``issue_replay``, ``issue_coll_comm``, ``extract_comm_group``) and
``astra-sim/workload/feeder_v3/et_feeder_node.cpp`` (``runtime()`` returns
``duration_micros``) of astra-sim/astra-sim at 0383c203930c and 2aa2bbd1662c.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from .._io import read_mapping
from ..errors import ConfigError, FlowsimWarning, describe
from .chakra_codec import iter_et, metadata_dict, node_dict
from .chakra_export import save_chakra
from .chakra_format import _rank_files, read_et, write_et  # noqa: F401  (re-exported)
from .chakra_nodes import READ_ATTRIBUTES, TraceContext, group_key, node_to_op, trace_units
from .chakra_schema import COLLECTIVE_COMM_TYPES, NODE_TYPES  # noqa: F401  (re-exported)
from .chakra_spmd import spmd_programs, spmd_trace
from .graph import Op, Program, Workload, _some, topological_order

__all__ = ["load_chakra", "read_custom_collective", "read_et", "save_chakra", "write_et"]


def load_chakra(prefix_or_dir: str | os.PathLike, npus: int | None = None,
                comm_group: str | os.PathLike | Mapping[str, Sequence[int]] | None = None, *,
                ndims: int | None = None, spmd: bool = False,
                element_bytes: int | None = None) -> Workload:
    """Read the Chakra traces ``<prefix>.<rank>.et`` as one program per rank (see module doc).

    Parameters
    ----------
    prefix_or_dir : path
        The path prefix ASTRA-sim takes (``.../all_reduce`` for ``all_reduce.0.et`` ...), one
        of the files, or a folder holding the files of exactly one workload.
    npus : int, optional
        Number of NPUs of the network; default: the number of rank files. Files must exist for
        exactly ranks ``0..npus-1`` (unless ``spmd``).
    comm_group : path or mapping, optional
        ASTRA-sim's communicator-group json ``{"<pg_name>": [ranks]}`` or its dict. Default:
        ``<prefix>.comm_group.json`` (what :func:`save_chakra` writes), else ``<prefix>.json``
        (what symbolic_tensor_graph writes), if one exists.
    ndims : int, optional
        Dimensions of the network: ``involved_dim`` entries beyond them are ignored, as
        ASTRA-sim does (it loops over the topology's dimensions only). Default: keep all.
    spmd : bool
        Run one rank's trace on every one of ``npus`` NPUs (:mod:`.chakra_spmd` states how
        its communicators map onto them); ``prefix_or_dir`` is that file, or a prefix or
        folder with the trace of one rank.
    element_bytes : int, optional
        Bytes per element of a trace whose sizes count elements (symbolic_tensor_graph's;
        default 2).

    Raises
    ------
    ConfigError
        Missing or gapped rank files, corrupt files, unsupported nodes, unknown communicators,
        ranks outside the network, dependencies on missing nodes or cycles (the message names
        the file and the node).

    Warns
    -----
    FlowsimWarning
        With the counts of host-side communication nodes run as host CPU ops, and of
        ``ctrl_deps`` ignored because they are not a dependency relation (see module doc).
    """
    element_bytes = _element_bytes(element_bytes)
    if spmd:
        if npus is None:
            raise ConfigError("argument 'npus': an SPMD run needs the network's NPU count")
        file, prefix, rank = spmd_trace(prefix_or_dir)
        files, ranks = [file], [rank]
    else:
        prefix, files = _rank_files(prefix_or_dir, npus)
        ranks = list(range(len(files)))
    groups, group_source = _comm_groups(comm_group, prefix, None if spmd else len(files))
    tally: Counter = Counter()
    programs: list[Program] = []
    layers: list[str] = []
    count = npus if spmd and npus is not None else len(files)   # spmd: npus checked above
    for rank, file in zip(ranks, files):
        ctx = TraceContext(rank, count, groups, group_source, ndims,
                           tally=tally)
        metadata, ops = _read_rank(file, ctx, element_bytes)
        # what the device or the network does: GPU compute, communication, memory
        tally["device_work"] += sum(op.kind != "compute" or (not op.host and (
            op.duration_ns > 0 or op.flops > 0 or op.kernels != ())) for op in ops)
        tally["host_work"] += sum(op.kind == "compute" and bool(op.host) for op in ops)
        if not programs:
            names = metadata["attrs"].get("flowsim_layers", [])
            layers = [str(x) for x in names] if isinstance(names, list) else []
        program = Program(ops, np.array([rank]), str(file))
        topological_order(program)
        programs.append(program)
    if spmd:
        programs = spmd_programs(programs[0].ops, count, str(files[0]))
    _warn(tally, prefix)
    return Workload(programs, layers, prefix.name)


def _element_bytes(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)
                              or not 1 <= int(value) <= 64):
        raise ConfigError(f"argument 'element_bytes': expected an integer in 1..64, found "
                          f"{describe(value)}")
    return None if value is None else int(value)


def _read_rank(file: Path, ctx: TraceContext, element_bytes: int | None
               ) -> tuple[dict, list[Op]]:
    """One rank's metadata and ops, read node by node."""
    messages = iter_et(file)
    _, first = next(messages)
    metadata = metadata_dict(first)
    ctx.units = trace_units(metadata, element_bytes, str(file))
    ops = [node_to_op(node_dict(message, READ_ATTRIBUTES), ctx, str(file))
           for _, message in messages]
    _drop_unusable_ctrl_deps(ops, ctx.tally)
    return metadata, ops


def _drop_unusable_ctrl_deps(ops: list[Op], tally: Counter) -> None:
    """A file whose ``ctrl_deps`` name absent nodes or a node itself has no usable control
    dependencies (Chakra's PyTorch converter writes host-trace parents there: dropped root
    nodes, self references, cycles with the data dependencies); they are all ignored, and
    the ``data_deps`` order the nodes, as Chakra's feeder v2 reads such traces."""
    ids = {op.id for op in ops}
    dangling = sum(d not in ids for op in ops for d in op.ctrl_deps)
    own = sum(op.id in op.ctrl_deps for op in ops)
    if not dangling and not own:
        return
    tally.update(ctrl_files=1, ctrl_dangling=dangling, ctrl_own=own,
                 ctrl_deps=sum(len(op.ctrl_deps) for op in ops))
    for op in ops:
        op.ctrl_deps = ()


def _warn(tally: Counter, prefix: Path) -> None:
    """One warning per thing the reader did not take literally, with its count."""
    if tally["cpu_comm"]:
        typed = tally["cpu_comm_typed"]
        warnings.warn(
            f"{prefix}: {tally['cpu_comm']} host-side communication node(s) (is_cpu_op: "
            f"PyTorch's c10d wrappers) run as host CPU ops of their traced duration, not as "
            f"collectives; the GPU node each one launches carries the communication"
            + (f" ({typed} of them carry a comm_type, not simulated)" if typed else ""),
            FlowsimWarning, stacklevel=3)
    if tally["host_work"] and not tally["device_work"]:
        warnings.warn(
            f"{prefix}: every node is a host CPU op (is_cpu_op), with no device compute and no "
            f"communication node, so the network plays no part: a trace captured without GPUs "
            f"(gloo on CPUs, say), where Chakra's converter, which makes communication nodes "
            f"from NCCL kernels only, leaves collectives as CPU ops", FlowsimWarning,
            stacklevel=3)
    if tally["ctrl_files"]:
        warnings.warn(
            f"{prefix}: {tally['ctrl_deps']} ctrl_deps of {tally['ctrl_files']} file(s) "
            f"ignored ({tally['ctrl_dangling']} name absent nodes, {tally['ctrl_own']} their "
            f"own node): they are not a dependency relation there; data_deps order the nodes, "
            f"as Chakra's feeder v2 reads them", FlowsimWarning, stacklevel=3)


def read_custom_collective(path_prefix: str | os.PathLike) -> list[list[Op]]:
    """Read an ASTRA-sim custom collective (``<prefix>.<rank>.et``, as named by the system
    json's ``all-reduce-implementation-custom`` and friends): the ops of each rank.

    Ranks are positions in the communicator (ASTRA-sim maps ``comm_src``/``comm_dst`` through
    the communicator's NPU list), and each ``peer`` is such a position. Sizes are the fixed
    ``comm_size`` bytes written in the trace: ASTRA-sim ignores the size of the collective
    node that invokes the algorithm, so a trace made for 1 MiB always moves the same bytes
    (scale by ``size / traced size`` to reuse it at another size). ``COMP_NODE`` ops (the
    reductions) take ``duration_micros * 1000`` ns, 1 ns when zero, as in ASTRA-sim.
    """
    prefix, files = _rank_files(path_prefix, None)
    out = []
    for rank, file in enumerate(files):
        _, nodes = read_et(file)
        ctx = TraceContext(rank, len(files))
        ops = []
        for node in nodes:
            if node["type"] not in ("COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"):
                raise ConfigError(f"{file}: node {node['id']} is a {node['type']}; a custom "
                                  f"collective holds only COMM_SEND, COMM_RECV and COMP nodes")
            ops.append(node_to_op(node, ctx, str(file)))
        topological_order(Program(ops, np.array([rank]), str(file)))
        out.append(ops)
    return out


def _comm_groups(comm_group: Any, prefix: Path, npus: int | None
                 ) -> tuple[dict[str, tuple[int, ...]] | None, str | None]:
    """The communicator groups, checked (ranks inside ``0..npus-1`` unless ``npus`` is
    None: an SPMD trace's groups name the ranks of the job it was captured in)."""
    if comm_group is None:
        beside = [Path(f"{prefix}.comm_group.json"), Path(f"{prefix}.json")]
        comm_group = next((p for p in beside if p.is_file()), None)
        if comm_group is None:
            return None, None
    if isinstance(comm_group, Mapping):
        data, source = dict(comm_group), "argument 'comm_group'"
    else:
        source = str(comm_group)
        data = read_mapping(comm_group, what="communicator group")
    groups = {}
    for key, ranks in data.items():
        if (not isinstance(ranks, (list, tuple)) or not ranks
                or any(isinstance(r, bool) or not isinstance(r, Integral) for r in ranks)
                or len(set(ranks)) != len(ranks) or min(ranks) < 0):
            raise ConfigError(f"{source}: communicator {key!r}: expected a list of distinct "
                              f"NPU ids, found {describe(ranks)}")
        outside = [r for r in ranks if npus is not None and not 0 <= r < npus]
        if outside and npus is not None:
            raise ConfigError(f"{source}: communicator {key!r}: rank(s) {_some(outside)} "
                              f"outside the network's NPUs 0..{npus - 1}")
        groups[group_key(str(key))] = tuple(int(r) for r in ranks)
    return groups, source
