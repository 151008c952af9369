"""Writing a workload as Chakra execution traces (``<prefix>.<rank>.et``), ASTRA-sim's layout;
:func:`~.chakra.load_chakra` reads them back as the same graph (mapping in :mod:`.chakra`)."""

from __future__ import annotations

import json
import os
from numbers import Integral
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..collectives import canonical_collective
from ..errors import ConfigError, describe
from .chakra_format import _COMM_TYPE_OF, _EXTRAS, LOCAL_MEMORY, _scan, write_et
from .graph import Op, Program, Workload, topological_order


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
    attrs: dict[str, Any] = {"is_cpu_op": bool(op.host)}
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
        coll_name = canonical_collective(op.collective)
        if coll_name not in _COMM_TYPE_OF:
            raise ConfigError(f"{where}: collective {op.collective!r} has no Chakra comm_type "
                              f"(supported: {', '.join(_COMM_TYPE_OF)})")
        attrs.update(comm_type=_COMM_TYPE_OF[coll_name], comm_size=int(op.size))
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
        if op.peer is not None:
            peer = op.peer
        elif op.peer_offset is not None:
            peer = rank + op.peer_offset
        else:
            raise ConfigError(f"{where}: {op.kind} without peer or peer_offset")
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
