"""Chakra execution traces (``.et``) into and out of flowsim's graph model.

An ``.et`` file is a stream of protobuf messages, each preceded by its length as a varint: one
``GlobalMetadata``, then one ``Node`` per op. A workload is one file per NPU,
``<prefix>.<rank>.et`` for rank 0..n-1, as ASTRA-sim 2.x reads them (``--workload-configuration
=<prefix>``). The wire format is decoded in :mod:`._protowire`; no protoc, no protobuf package.

Mapping to :class:`~flowsim.workload.graph.Op` (mirroring ASTRA-sim's ``Workload.cc``)
---------------------------------------------------------------------------------------
``COMP_NODE`` -> ``compute``
    **Time unit:** ``duration_micros`` is microseconds, so ``duration_ns = duration_micros *
    1000``. ASTRA-sim's feeder takes its ``runtime()`` from ``duration_micros`` (there is no
    ``runtime`` attribute) and converts with the same factor; a node of zero duration costs it
    1 ns, and so here, unless the node has ``num_ops`` (then it is left to the roofline).
    ``num_ops`` (FLOPs) and ``tensor_size`` (bytes) go to ``flops`` and ``mem_bytes``.
    ``is_cpu_op`` nodes are not skipped by ASTRA-sim (they run on a separate CPU slot); here
    they are ordinary compute ops, so they serialise with the NPU's other compute ops.
``COMM_COLL_NODE`` -> ``collective``
    ``comm_type`` (``CollectiveCommType``), ``comm_size`` bytes, ``involved_dim`` (bool list:
    the indices of True become ``dims``; absent: all dimensions, ``None``), ``pg_name`` (an id
    of the communicator-group json ``{"<id>": [ranks]}``; ``""`` and ``"0"`` mean all NPUs, as
    in ASTRA-sim). ASTRA-sim simulates only all-reduce, all-gather, reduce-scatter and
    all-to-all (broadcast is replayed for its ``duration_micros``); flowsim also simulates
    ``BROADCAST`` and ``REDUCE`` (Chakra has no root field: the engine's default root). The
    others (``GATHER``, ``SCATTER``, ``REDUCE_SCATTER_BLOCK``, ``BARRIER``) are errors.
``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` -> ``send`` / ``recv``
    ``peer`` = ``comm_dst`` / ``comm_src``, ``tag`` = ``comm_tag``, ``size`` = ``comm_size``.
``MEM_LOAD_NODE`` / ``MEM_STORE_NODE`` -> ``memory`` of ``tensor_size`` bytes
    ASTRA-sim sends every one to its remote-memory model; ``remote`` is therefore True unless
    ``tensor_loc`` says ``LOCAL_MEMORY`` (1; Chakra's older ``MemoryType``: 0 invalid, 1
    local, 2 remote).
``METADATA_NODE`` / ``INVALID_NODE`` -> a zero-duration ``compute`` op (ASTRA-sim skips them;
    keeping them keeps the dependencies valid).

``data_deps`` become ``deps`` and ``ctrl_deps`` ``ctrl_deps``. Attributes named ``flowsim_*``
are flowsim's own (ASTRA-sim looks attributes up by name and ignores them): the exact
``duration_ns`` when it is not a positive whole number of microseconds, and the op fields
Chakra cannot express (``gap_ns``, ``update_delay_ns``, ``priority``, ``layer``, ``pass_``;
the layer names in ``GlobalMetadata``), so that ``load_chakra(save_chakra(w))`` gives back the
same graph.

Sources of the ASTRA-sim behaviour: ``astra-sim/workload/Workload.cc`` (``issue``,
``issue_replay``, ``issue_coll_comm``, ``extract_comm_group``) and
``astra-sim/workload/feeder_v3/et_feeder_node.cpp`` (``runtime()`` returns
``duration_micros``) of astra-sim/astra-sim at 0383c203930c and 2aa2bbd1662c.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from .._io import read_mapping, write_bytes_atomic, write_text_atomic
from ..collectives import canonical_collective
from ..errors import ConfigError, describe
from . import _protowire as pw
from ._protowire import COLLECTIVE_COMM_TYPES, NODE_TYPES  # noqa: F401  (re-exported)
from .graph import PASSES, PRIORITIES, Op, Program, Workload, _some, topological_order

LOCAL_MEMORY = 1  # tensor_loc value of Chakra's old MemoryType enum
_FLOWSIM_COLLECTIVES = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather",
                        "REDUCE_SCATTER": "reduce_scatter", "ALL_TO_ALL": "all_to_all",
                        "BROADCAST": "broadcast", "REDUCE": "reduce"}
_COMM_TYPE_OF = {flowsim: next(k for k, v in COLLECTIVE_COMM_TYPES.items() if v == chakra)
                 for chakra, flowsim in _FLOWSIM_COLLECTIVES.items()}
#: op fields kept in ``flowsim_*`` attributes when they differ from these defaults
_EXTRAS = (("gap_ns", 0.0), ("update_delay_ns", 0.0), ("priority", "default"), ("layer", -1),
           ("pass_", ""))
_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>0|[1-9][0-9]*)\.et$")


# ------------------------------------------------------------------------------- read / write

def read_et(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """Decode one ``.et`` file.

    Returns
    -------
    metadata : dict
        ``version`` (str), ``attrs`` and ``attr_types`` (as for nodes).
    nodes : list of dict
        In file order: ``id``, ``name``, ``type`` (``NodeType`` name), ``ctrl_deps``,
        ``data_deps`` (lists of int), ``start_time_micros``, ``duration_micros``, ``inputs`` and
        ``outputs`` (``{"values", "shapes", "types"}`` or None), ``attrs`` (name -> Python
        value; lists for ``*_list``; the first of repeated names, as ASTRA-sim's lookup) and
        ``attr_types`` (name -> proto kind such as ``"int64_val"``).

    Raises
    ------
    ConfigError
        Unreadable, empty, truncated or corrupt file; the message names the file, the byte
        offset and the node's index in the file.
    """
    file = Path(path)
    try:
        buf = memoryview(file.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{file}: Chakra trace not found") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read Chakra trace: {exc}") from None
    metadata: dict | None = None
    nodes: list[dict] = []
    try:
        for _, start, stop in pw.iter_delimited(buf):
            if metadata is None:
                metadata = pw.decode_metadata(buf, start, stop)
            else:
                nodes.append(pw.decode_node(buf, start, stop))
    except pw.WireError as exc:
        where = "GlobalMetadata" if metadata is None else f"node #{len(nodes)}"
        raise ConfigError(f"{file}: corrupt Chakra trace at byte {exc.offset} ({where}): "
                          f"{exc}") from None
    if metadata is None:
        raise ConfigError(f"{file}: empty file, expected a Chakra trace (GlobalMetadata, then "
                          f"nodes)")
    return metadata, nodes


def write_et(path: str | os.PathLike, nodes: Sequence[Mapping[str, Any]],
             metadata_version: str = "0.0.4", *,
             metadata_attrs: Mapping[str, Any] | None = None) -> None:
    """Write nodes in :func:`read_et`'s format (``type`` may be a name or the enum value).

    Missing keys take proto defaults. Attribute kinds come from ``attr_types`` when given,
    else from the Python value: bool -> ``bool_val``, int -> ``int64_val`` (``uint64_val``
    above 2**63-1), float -> ``double_val``, str -> ``string_val``, bytes -> ``bytes_val``,
    lists likewise ``*_list``. The file is replaced atomically.
    """
    problems = (AttributeError, KeyError, TypeError, ValueError, OverflowError, struct.error,
                UnicodeError)
    try:
        out = bytearray(pw.delimited(pw.encode_metadata(metadata_version, metadata_attrs or {})))
    except problems as exc:
        raise ConfigError(f"{path}: GlobalMetadata cannot be encoded: {exc}") from None
    for index, node in enumerate(nodes):
        try:
            out += pw.delimited(pw.encode_node(node))
        except problems as exc:
            raise ConfigError(f"{path}: node #{index} (id {node.get('id', '?')}) cannot be "
                              f"encoded: {exc}") from None
    write_bytes_atomic(path, bytes(out))


# ------------------------------------------------------------------------------ graph mapping

def load_chakra(prefix_or_dir: str | os.PathLike, npus: int | None = None,
                comm_group: str | os.PathLike | Mapping[str, Sequence[int]] | None = None, *,
                ndims: int | None = None) -> Workload:
    """Read the Chakra traces ``<prefix>.<rank>.et`` as one program per rank (see module doc).

    Parameters
    ----------
    prefix_or_dir : path
        The path prefix ASTRA-sim takes (``.../all_reduce`` for ``all_reduce.0.et`` ...), one
        of the files, or a folder holding the files of exactly one workload.
    npus : int, optional
        Number of NPUs of the network; default: the number of rank files. Files must exist for
        exactly ranks ``0..npus-1``.
    comm_group : path or mapping, optional
        ASTRA-sim's communicator-group json ``{"<pg_name>": [ranks]}`` or its dict. Default:
        ``<prefix>.comm_group.json`` if it exists (what :func:`save_chakra` writes).
    ndims : int, optional
        Dimensions of the network: ``involved_dim`` entries beyond them are ignored, as
        ASTRA-sim does (it loops over the topology's dimensions only). Default: keep all.

    Raises
    ------
    ConfigError
        Missing or gapped rank files, corrupt files, unsupported nodes, unknown communicators,
        ranks outside the network, dependencies on missing nodes or cycles (the message names
        the file and the node).
    """
    prefix, files = _rank_files(prefix_or_dir, npus)
    groups, group_source = _comm_groups(comm_group, prefix, len(files))
    programs, layers = [], []
    for rank, file in enumerate(files):
        metadata, nodes = read_et(file)
        if rank == 0:
            names = metadata["attrs"].get("flowsim_layers", [])
            layers = [str(x) for x in names] if isinstance(names, list) else []
        ops = [_node_to_op(node, rank, len(files), groups, group_source, str(file), ndims)
               for node in nodes]
        program = Program(ops, np.array([rank]), str(file))
        topological_order(program)
        programs.append(program)
    return Workload(programs, layers, prefix.name)


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
        ops = []
        for node in nodes:
            if node["type"] not in ("COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"):
                raise ConfigError(f"{file}: node {node['id']} is a {node['type']}; a custom "
                                  f"collective holds only COMM_SEND, COMM_RECV and COMP nodes")
            ops.append(_node_to_op(node, rank, len(files), None, None, str(file)))
        topological_order(Program(ops, np.array([rank]), str(file)))
        out.append(ops)
    return out


def _node_to_op(node: dict, rank: int, npus: int, groups: dict | None, group_source: str | None,
                source: str, ndims: int | None = None) -> Op:
    where = f"{source}: node {node['id']} ({node['name'] or node['type']})"
    attrs, kind = node["attrs"], node["type"]
    op = Op(node["id"], "compute", node["name"], deps=tuple(node["data_deps"]),
            ctrl_deps=tuple(node["ctrl_deps"]))
    if kind == "COMP_NODE":
        op.flops = _number(attrs, "num_ops", where, 0.0)
        op.mem_bytes = _number(attrs, "tensor_size", where, 0.0)
        op.duration_ns = node["duration_micros"] * 1000.0 or (0.0 if op.flops else 1.0)
    elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        op.kind = "memory"
        op.size = _count(attrs, "tensor_size", where)
        op.remote = _count(attrs, "tensor_loc", where, 0) != LOCAL_MEMORY
    elif kind.startswith("COMM_"):
        if attrs.get("is_cpu_op"):
            raise ConfigError(f"{where}: a communication node cannot be a CPU op "
                              f"(is_cpu_op is true)")
        op.size = _count(attrs, "comm_size", where)
        if kind == "COMM_COLL_NODE":
            _collective(op, attrs, rank, npus, groups, group_source, where, ndims)
        else:
            op.kind = "send" if kind == "COMM_SEND_NODE" else "recv"
            me, other = ("comm_src", "comm_dst") if op.kind == "send" else ("comm_dst", "comm_src")
            if _count(attrs, me, where, rank) != rank:
                raise ConfigError(f"{where}: {op.kind} issued by rank {rank} has {me} "
                                  f"{attrs[me]}")
            op.peer = _count(attrs, other, where)
            if op.peer >= npus:
                raise ConfigError(f"{where}: {other} {op.peer} is outside the network's NPUs "
                                  f"0..{npus - 1}")
            op.tag = _count(attrs, "comm_tag", where)
    _read_extras(op, attrs, where)
    return op


def _collective(op: Op, attrs: dict, rank: int, npus: int, groups: dict | None,
                group_source: str | None, where: str, ndims: int | None) -> None:
    op.kind = "collective"
    code = _count(attrs, "comm_type", where)
    chakra = COLLECTIVE_COMM_TYPES.get(code, f"value {code}")
    name = canonical_collective(_FLOWSIM_COLLECTIVES.get(chakra))
    if name is None:
        raise ConfigError(f"{where}: comm_type {chakra} is not supported (supported: "
                          f"{', '.join(_FLOWSIM_COLLECTIVES)})")
    op.collective = name
    if "involved_dim" in attrs:
        flags = attrs["involved_dim"]
        if not isinstance(flags, list) or any(f not in (0, 1) for f in flags):
            raise ConfigError(f"{where}: attribute 'involved_dim': expected a bool list, "
                              f"found {describe(flags)}")
        op.dims = tuple(i for i, f in enumerate(flags[:ndims]) if f)
    pg = attrs.get("pg_name", "")
    key = _group_key(str(pg))
    if key in ("", "0"):
        return
    if groups is None:
        raise ConfigError(f"{where}: uses communicator pg_name={pg!r} but no "
                          f"communicator-group file was given")
    if key not in groups:
        raise ConfigError(f"{where}: communicator pg_name={pg!r} is not in {group_source} "
                          f"(it has {', '.join(sorted(groups)) or 'none'})")
    op.group = groups[key]
    if rank not in op.group:
        raise ConfigError(f"{where}: rank {rank} issues a collective on communicator "
                          f"{pg!r} of {group_source}, which does not include it")


def _read_extras(op: Op, attrs: dict, where: str) -> None:
    if "flowsim_duration_ns" in attrs:
        op.duration_ns = _number(attrs, "flowsim_duration_ns", where)
    for field, default in _EXTRAS:
        name = f"flowsim_{field.rstrip('_')}"
        if name not in attrs:
            continue
        value = attrs[name]
        if isinstance(default, float):
            value = _number(attrs, name, where)
        elif field == "layer":
            if isinstance(value, bool) or not isinstance(value, Integral) or value < -1:
                raise ConfigError(f"{where}: attribute '{name}': expected a layer index, "
                                  f"found {describe(value)}")
        elif value not in (PRIORITIES if field == "priority" else ("", *PASSES)):
            raise ConfigError(f"{where}: attribute '{name}': unexpected value "
                              f"{describe(value)}")
        setattr(op, field, value)


def _number(attrs: dict, name: str, where: str, default: Any = ...) -> float:
    value = attrs.get(name, default)
    if value is ...:
        raise ConfigError(f"{where}: missing attribute '{name}'")
    if isinstance(value, bool) or not isinstance(value, Real) or not value >= 0:
        raise ConfigError(f"{where}: attribute '{name}': expected a number >= 0, found "
                          f"{describe(value)}")
    return float(value)


def _count(attrs: dict, name: str, where: str, default: Any = ...) -> int:
    value = _number(attrs, name, where, default)
    if value != int(value):
        raise ConfigError(f"{where}: attribute '{name}': expected a whole number, found "
                          f"{describe(attrs[name])}")
    return int(value)


def _group_key(name: str) -> str:
    """ASTRA-sim reads communicator ids with ``std::stoi``: ``"01"`` is ``"1"``."""
    name = name.strip()
    return str(int(name)) if name.isdecimal() else name


def _comm_groups(comm_group: Any, prefix: Path, npus: int
                 ) -> tuple[dict[str, tuple[int, ...]] | None, str | None]:
    if comm_group is None:
        beside = Path(f"{prefix}.comm_group.json")
        if not beside.is_file():
            return None, None
        comm_group = beside
    if isinstance(comm_group, Mapping):
        data, source = dict(comm_group), "argument 'comm_group'"
    else:
        source = str(comm_group)
        data = read_mapping(comm_group, what="communicator group")
    groups = {}
    for key, ranks in data.items():
        if (not isinstance(ranks, (list, tuple)) or not ranks
                or any(isinstance(r, bool) or not isinstance(r, Integral) for r in ranks)
                or len(set(ranks)) != len(ranks)):
            raise ConfigError(f"{source}: communicator {key!r}: expected a list of distinct "
                              f"NPU ids, found {describe(ranks)}")
        outside = [r for r in ranks if not 0 <= r < npus]
        if outside:
            raise ConfigError(f"{source}: communicator {key!r}: rank(s) {_some(outside)} "
                              f"outside the network's NPUs 0..{npus - 1}")
        groups[_group_key(str(key))] = tuple(int(r) for r in ranks)
    return groups, source


def _scan(prefix: Path) -> dict[int, Path]:
    if not prefix.parent.is_dir():
        return {}
    found = {}
    for file in prefix.parent.iterdir():
        match = _RANK_FILE.match(file.name)
        if match and match["stem"] == prefix.name:
            found[int(match["rank"])] = file
    return found


def _rank_files(prefix_or_dir: str | os.PathLike, npus: int | None) -> tuple[Path, list[Path]]:
    given = Path(prefix_or_dir)
    if given.is_file() and (match := _RANK_FILE.match(given.name)):
        given = given.parent / match["stem"]          # one of the files: its workload
    elif given.is_dir():
        stems = sorted({m["stem"] for f in given.iterdir()
                        if (m := _RANK_FILE.match(f.name))})
        if len(stems) != 1:
            found = f"traces of several workloads ({', '.join(stems)}); pass a path prefix" \
                if stems else "no Chakra trace files '<prefix>.<rank>.et'"
            raise ConfigError(f"{given}: {found}")
        given = given / stems[0]
    ranks = _scan(given)
    if not ranks:
        raise ConfigError(f"{given}: no Chakra trace files '{given.name}.<rank>.et' in "
                          f"{given.parent}")
    if npus is not None and (isinstance(npus, bool) or not isinstance(npus, Integral)
                             or npus < 1):
        raise ConfigError(f"argument 'npus': expected a positive integer, found "
                          f"{describe(npus)}")
    count = max(ranks) + 1 if npus is None else int(npus)
    if len(ranks) == max(ranks) + 1 and len(ranks) != count:
        raise ConfigError(f"{given}: trace files for {len(ranks)} ranks, but the network has "
                          f"{count} NPUs (one trace per NPU)")
    missing = [r for r in range(count) if r not in ranks]
    if missing:
        raise ConfigError(f"{given}: missing trace file(s) for rank(s) {_some(missing)} "
                          f"(expected {given.name}.0.et .. {given.name}.{count - 1}.et)")
    if len(ranks) > count:
        raise ConfigError(f"{given}: trace files for {len(ranks)} ranks, but the network has "
                          f"{npus} NPUs (one trace per NPU)")
    return given, [ranks[r] for r in range(count)]


# ------------------------------------------------------------------------------------ export

def save_chakra(workload: Workload, prefix: str | os.PathLike, npus: int, *,
                ndims: int | None = None) -> list[Path]:
    """Write ``workload`` as ``<prefix>.<rank>.et`` for rank 0..npus-1 (ASTRA-sim's layout).

    SPMD programs are expanded to one file per NPU, ``peer_offset`` resolved to absolute
    ranks; NPUs that run no program get a trace without nodes. Collective ``dims`` become
    ``involved_dim`` over ``ndims`` dimensions; explicit ``group`` tuples become ``pg_name``
    ids 1, 2, ... of ``<prefix>.comm_group.json``, written beside the traces (pass it to
    ASTRA-sim as ``--comm-group-configuration``). Rank files of an earlier export with more
    NPUs, and a stale comm-group file, are removed.

    Returns
    -------
    list of Path
        The files written.
    """
    prefix = Path(prefix)
    if isinstance(npus, bool) or not isinstance(npus, Integral) or npus < 1:
        raise ConfigError(f"argument 'npus': expected a positive integer, found "
                          f"{describe(npus)}")
    owner: list[Program | None] = [None] * npus
    for program in workload.programs:
        for npu in program.npus.tolist():
            if not 0 <= npu < npus:
                raise ConfigError(f"{program.source}: NPU {npu} is outside 0..{npus - 1}")
            if owner[npu] is not None:
                raise ConfigError(f"{program.source}: NPU {npu} already runs "
                                  f"{owner[npu].source}")
            owner[npu] = program
    orders = {id(p): topological_order(p) for p in workload.programs}
    group_ids: dict[tuple[int, ...], int] = {}
    meta_attrs = {"flowsim_layers": list(workload.layers)} if workload.layers else {}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for rank in range(npus):
        program = owner[rank]
        nodes = [] if program is None else [
            _op_to_node(op, rank, npus, ndims, group_ids, program.source)
            for op in orders[id(program)]]
        written.append(Path(f"{prefix}.{rank}.et"))
        write_et(written[-1], nodes, metadata_attrs=meta_attrs)
    for rank, file in _scan(prefix).items():
        if rank >= npus:
            file.unlink()
    group_file = Path(f"{prefix}.comm_group.json")
    if group_ids:
        write_text_atomic(group_file, json.dumps(
            {str(i): list(g) for g, i in group_ids.items()}, indent=1) + "\n")
        written.append(group_file)
    else:
        group_file.unlink(missing_ok=True)
    return written


def _op_to_node(op: Op, rank: int, npus: int, ndims: int | None,
                group_ids: dict[tuple[int, ...], int], source: str) -> dict:
    where = f"{source}: op {op.id} ({op.name or op.kind})"
    if op.id < 0:
        raise ConfigError(f"{where}: Chakra node ids are unsigned")
    attrs: dict[str, Any] = {"is_cpu_op": False}
    node = {"id": op.id, "name": op.name, "ctrl_deps": list(op.ctrl_deps),
            "data_deps": list(op.deps), "attrs": attrs}
    if op.kind == "compute":
        node["type"] = "COMP_NODE"
        node["duration_micros"] = int(round(op.duration_ns / 1000))
        for name, value in (("num_ops", op.flops), ("tensor_size", op.mem_bytes)):
            if value:
                attrs[name] = int(value) if float(value).is_integer() else float(value)
        if op.duration_ns == 0 or op.duration_ns % 1000:
            attrs["flowsim_duration_ns"] = float(op.duration_ns)
    elif op.kind == "memory":
        node["type"] = "MEM_LOAD_NODE"
        del attrs["is_cpu_op"]
        attrs.update(tensor_size=int(op.size), tensor_loc=2 if op.remote else LOCAL_MEMORY)
        if op.duration_ns:
            attrs["flowsim_duration_ns"] = float(op.duration_ns)
    elif op.kind == "collective":
        node["type"] = "COMM_COLL_NODE"
        name = canonical_collective(op.collective)
        if name not in _COMM_TYPE_OF:
            raise ConfigError(f"{where}: collective {op.collective!r} has no Chakra comm_type "
                              f"(supported: {', '.join(_COMM_TYPE_OF)})")
        attrs.update(comm_type=_COMM_TYPE_OF[name], comm_size=int(op.size))
        if op.dims is not None:
            if ndims is None or any(not 0 <= d < ndims for d in op.dims):
                raise ConfigError(f"{where}: dims {op.dims} need ndims covering them "
                                  f"(argument 'ndims' is {ndims})")
            attrs["involved_dim"] = [d in op.dims for d in range(ndims)]
        if op.group:
            group = tuple(int(r) for r in op.group)
            if any(not 0 <= r < npus for r in group):
                raise ConfigError(f"{where}: group {group} is outside NPUs 0..{npus - 1}")
            attrs["pg_name"] = str(group_ids.setdefault(group, len(group_ids) + 1))
    elif op.kind in ("send", "recv"):
        node["type"] = "COMM_SEND_NODE" if op.kind == "send" else "COMM_RECV_NODE"
        if op.peer is None and op.peer_offset is None:
            raise ConfigError(f"{where}: {op.kind} without peer or peer_offset")
        peer = op.peer if op.peer is not None else rank + op.peer_offset
        if not 0 <= peer < npus:
            raise ConfigError(f"{where}: peer {peer} of NPU {rank} is outside 0..{npus - 1}")
        src, dst = (rank, peer) if op.kind == "send" else (peer, rank)
        attrs.update(comm_src=src, comm_dst=dst, comm_tag=int(op.tag), comm_size=int(op.size))
    else:
        raise ConfigError(f"{where}: unknown op kind {op.kind!r}")
    for field, default in _EXTRAS:
        value = getattr(op, field)
        if value != default:
            attrs[f"flowsim_{field.rstrip('_')}"] = float(value) if isinstance(
                default, float) else value
    return node
