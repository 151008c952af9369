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

import os
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from .._io import read_mapping
from .._validate import DURATION_NS, FLOPS, MAX_INT, SIZE_BYTES, as_number
from ..collectives import canonical_collective
from ..errors import ConfigError, describe
from ._protowire import COLLECTIVE_COMM_TYPES, NODE_TYPES  # noqa: F401  (re-exported)
from .chakra_export import save_chakra
from .chakra_format import (
    _EXTRAS,
    _FLOWSIM_COLLECTIVES,
    LOCAL_MEMORY,
    _rank_files,
    read_et,
    write_et,  # noqa: F401  (re-exported)
)
from .graph import PASSES, PRIORITIES, Op, Program, Workload, _some, topological_order

__all__ = ["load_chakra", "read_custom_collective", "read_et", "save_chakra", "write_et"]


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
        op.flops = _number(attrs, "num_ops", where, 0.0, FLOPS.maximum)
        op.mem_bytes = _number(attrs, "tensor_size", where, 0.0, SIZE_BYTES.maximum)
        op.duration_ns = _number({"duration_micros": node["duration_micros"]},
                                 "duration_micros", where, 0.0, DURATION_NS.maximum / 1000) \
            * 1000.0 or (0.0 if op.flops else 1.0)
    elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        op.kind = "memory"
        op.size = _count(attrs, "tensor_size", where, limit=SIZE_BYTES.maximum)
        op.remote = _count(attrs, "tensor_loc", where, 0) != LOCAL_MEMORY
    elif kind.startswith("COMM_"):
        if attrs.get("is_cpu_op"):
            raise ConfigError(f"{where}: a communication node cannot be a CPU op "
                              f"(is_cpu_op is true)")
        op.size = _count(attrs, "comm_size", where, limit=SIZE_BYTES.maximum)
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
        if ndims is not None and op.dims == tuple(range(ndims)):
            op.dims = None  # every dimension: the same group as a node without the attribute
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


def _number(attrs: dict, name: str, where: str, default: Any = ...,
            limit: float = DURATION_NS.maximum) -> float:
    """A finite attribute value in ``[0, limit]`` (the toolkit's number, worded for
    attributes)."""
    value = attrs.get(name, default)
    if value is ...:
        raise ConfigError(f"{where}: missing attribute '{name}'")
    try:
        return as_number(value, source=where, key=name, minimum=0.0, maximum=limit)
    except ConfigError as exc:
        raise type(exc)(f"{where}: attribute '{name}': expected {exc.expected}, found "
                        f"{describe(value)}") from None


def _count(attrs: dict, name: str, where: str, default: Any = ...,
           limit: float = MAX_INT) -> int:
    """A whole attribute value in ``[0, limit]`` (sizes, ranks, tags, enum codes)."""
    value = _number(attrs, name, where, default, limit)
    if value != int(value):
        raise ConfigError(f"{where}: attribute '{name}': expected a whole number, found "
                          f"{describe(attrs[name])}")
    return int(value)


def _group_key(name: str) -> str:
    """ASTRA-sim reads communicator ids with ``std::stoi``: ``"01"`` is ``"1"`` (done on the
    text, so a thousand-digit id is just an unknown communicator)."""
    name = name.strip()
    if name.isdecimal() and name.isascii():
        return name.lstrip("0") or "0"
    return name


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


