"""One Chakra node into one :class:`~.graph.Op` (the mapping is documented in :mod:`.chakra`),
and the units of the tools that write traces."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

from .._validate import DURATION_NS, FLOPS, MAX_INT, SIZE_BYTES, as_number
from ..collectives import canonical_collective
from ..errors import ConfigError, describe
from .chakra_format import _EXTRAS, _FLOWSIM_COLLECTIVES, LOCAL_MEMORY
from .chakra_schema import COLLECTIVE_COMM_TYPES
from .graph import PASSES, PRIORITIES, Op

#: ``GlobalMetadata`` attribute ``schema`` of symbolic_tensor_graph's traces.
STG_SCHEMA = "symbolic_tensor_network"
#: Bytes per element of symbolic_tensor_graph's sizes unless told (bf16 / fp16 training).
STG_ELEMENT_BYTES = 2
#: Attributes the mapping reads, flowsim's own ``flowsim_*`` too (others are skipped while
#: decoding).
READ_ATTRIBUTES = frozenset({
    "is_cpu_op", "num_ops", "tensor_size", "tensor_loc", "comm_type", "comm_size", "comm_src",
    "comm_dst", "comm_tag", "involved_dim", "pg_name", "inputs", "flowsim_duration_ns",
    *(f"flowsim_{name.rstrip('_')}" for name, _ in _EXTRAS)})


@dataclass(frozen=True)
class TraceUnits:
    """How a trace counts work and data.

    Attributes
    ----------
    element_bytes : int
        Bytes per unit of ``comm_size`` and ``tensor_size`` (1: they are bytes, Chakra's
        convention).
    flops_per_op : float
        FLOPs per unit of ``num_ops`` (2: ``num_ops`` counts multiply-accumulates).
    input_sizes : bool
        Compute nodes list their inputs' sizes in an ``inputs`` attribute (name, size, ...),
        which count as memory traffic beside the output's ``tensor_size``.
    tool : str
        What wrote the trace, for messages.
    """

    element_bytes: int = 1
    flops_per_op: float = 1.0
    input_sizes: bool = False
    tool: str = "Chakra"


def trace_units(metadata: Mapping[str, Any], element_bytes: int | None, source: str
                ) -> TraceUnits:
    """The units of a trace from its ``GlobalMetadata``: symbolic_tensor_graph writes
    ``num_ops`` as multiply-accumulates and sizes as element counts (its ``schema`` attribute
    says ``symbolic_tensor_network``); every other writer, FLOPs and bytes."""
    if metadata.get("attrs", {}).get("schema") == STG_SCHEMA:
        return TraceUnits(element_bytes or STG_ELEMENT_BYTES, 2.0, True,
                          "symbolic_tensor_graph")
    if element_bytes is not None:
        raise ConfigError(f"{source}: argument 'element_bytes' applies to traces whose sizes "
                          f"count elements (symbolic_tensor_graph's); this trace's sizes are "
                          f"bytes")
    return TraceUnits()


@dataclass
class TraceContext:
    """What mapping a rank's nodes needs beyond the node itself.

    Attributes
    ----------
    rank, npus : int
        The rank of the file and the number of ranks (peers are checked against it).
    groups : dict or None
        Communicator groups by ``pg_name`` key; ``group_source`` names their file.
    ndims : int or None
        Network dimensions (``involved_dim`` entries beyond them are ignored).
    units : TraceUnits
    tally : Counter
        Counts of what the mapping did that users are warned about (``cpu_comm``: host-side
        communication nodes run as host ops; ``cpu_comm_typed``: those among them with a
        ``comm_type``).
    """

    rank: int
    npus: int
    groups: dict | None = None
    group_source: str | None = None
    ndims: int | None = None
    units: TraceUnits = TraceUnits()
    tally: Counter = field(default_factory=Counter)


def node_to_op(node: dict, ctx: TraceContext, source: str) -> Op:
    """The op of one node (:func:`~.chakra_format.read_et`'s dict)."""
    where = f"{source}: node {node['id']} ({node['name'] or node['type']})"
    attrs, kind = node["attrs"], node["type"]
    op = Op(node["id"], "compute", node["name"], deps=tuple(node["data_deps"]),
            ctrl_deps=tuple(node["ctrl_deps"]))
    cpu = _flag(attrs, "is_cpu_op", where)
    if kind == "COMP_NODE" or (cpu and kind.startswith("COMM_")):
        # a host-side comm node (PyTorch's c10d wrappers) is CPU work of its own duration,
        # never a collective: the GPU node it launches carries the communication
        _compute(op, node, attrs, where, ctx.units)
        op.host = cpu
        if kind.startswith("COMM_"):
            ctx.tally["cpu_comm"] += 1
            ctx.tally["cpu_comm_typed"] += "comm_type" in attrs
    elif kind in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
        op.kind = "memory"
        op.size = _count(attrs, "tensor_size", where, limit=SIZE_BYTES.maximum)
        op.remote = _count(attrs, "tensor_loc", where, 0) != LOCAL_MEMORY
    elif kind == "COMM_COLL_NODE":
        _collective(op, attrs, ctx, where)
    elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        _point_to_point(op, kind, attrs, ctx, where)
    # METADATA_NODE / INVALID_NODE: a zero-duration compute op keeps the dependencies valid
    _read_extras(op, attrs, where)
    return op


def _compute(op: Op, node: dict, attrs: dict, where: str, units: TraceUnits) -> None:
    op.flops = _number(attrs, "num_ops", where, 0.0, FLOPS.maximum) * units.flops_per_op
    elements = _number(attrs, "tensor_size", where, 0.0, SIZE_BYTES.maximum)
    if units.input_sizes and op.flops:
        elements += _input_elements(attrs, where)
    op.mem_bytes = elements * units.element_bytes
    op.duration_ns = _number({"duration_micros": node["duration_micros"]},
                             "duration_micros", where, 0.0, DURATION_NS.maximum / 1000) \
        * 1000.0 or (0.0 if op.flops else 1.0)


def _input_elements(attrs: dict, where: str) -> float:
    """Elements of a symbolic_tensor_graph node's inputs: its ``inputs`` attribute alternates
    tensor names and sizes."""
    listed = attrs.get("inputs", [])
    try:
        sizes = [float(v) for v in listed[1::2]] if isinstance(listed, list) else [-1.0]
    except (TypeError, ValueError):
        sizes = [-1.0]
    if any(not 0 <= s <= SIZE_BYTES.maximum for s in sizes):
        raise ConfigError(f"{where}: attribute 'inputs': expected tensor names and sizes, "
                          f"found {describe(listed)}")
    return sum(sizes)


def _collective(op: Op, attrs: dict, ctx: TraceContext, where: str) -> None:
    op.kind = "collective"
    code = _count(attrs, "comm_type", where)
    chakra = COLLECTIVE_COMM_TYPES.get(code, f"value {code}")
    if chakra == "BARRIER":
        # a barrier moves no data; NCCL-backed barriers are a one-element all-reduce: every
        # member waits for all the others, plus the all-reduce's latency
        op.collective, op.size = "all_reduce", 0
    else:
        name = canonical_collective(_FLOWSIM_COLLECTIVES.get(chakra))
        if name is None:
            raise ConfigError(f"{where}: comm_type {chakra} is not supported (supported: "
                              f"{', '.join(_FLOWSIM_COLLECTIVES)}, BARRIER)")
        op.collective = name
        op.size = _count(attrs, "comm_size", where, limit=SIZE_BYTES.maximum) \
            * ctx.units.element_bytes
    if "involved_dim" in attrs:
        flags = attrs["involved_dim"]
        if not isinstance(flags, list) or any(f not in (0, 1) for f in flags):
            raise ConfigError(f"{where}: attribute 'involved_dim': expected a bool list, "
                              f"found {describe(flags)}")
        op.dims = tuple(i for i, f in enumerate(flags[:ctx.ndims]) if f)
        if ctx.ndims is not None and op.dims == tuple(range(ctx.ndims)):
            op.dims = None  # every dimension: the same group as a node without the attribute
    _communicator(op, attrs, ctx, where)


def _communicator(op: Op, attrs: dict, ctx: TraceContext, where: str) -> None:
    """``pg_name``: an id of the communicator-group file; ``""`` and ``"0"`` mean all NPUs."""
    pg = attrs.get("pg_name", "")
    key = group_key(str(pg))
    if key in ("", "0"):
        return
    if ctx.groups is None:
        raise ConfigError(f"{where}: uses communicator pg_name={pg!r} but no "
                          f"communicator-group file was given (--comm-group)")
    if key not in ctx.groups:
        raise ConfigError(f"{where}: communicator pg_name={pg!r} is not in "
                          f"{ctx.group_source} (it has "
                          f"{', '.join(sorted(ctx.groups)) or 'none'})")
    op.group = ctx.groups[key]
    if ctx.rank not in op.group:
        raise ConfigError(f"{where}: rank {ctx.rank} issues a collective on communicator "
                          f"{pg!r} of {ctx.group_source}, which does not include it")


def _point_to_point(op: Op, kind: str, attrs: dict, ctx: TraceContext, where: str) -> None:
    op.kind = "send" if kind == "COMM_SEND_NODE" else "recv"
    # chakra_generator writes a send / recv's size as tensor_size only
    size = "comm_size" if "comm_size" in attrs or "tensor_size" not in attrs else "tensor_size"
    op.size = _count(attrs, size, where, limit=SIZE_BYTES.maximum) * ctx.units.element_bytes
    me, other = ("comm_src", "comm_dst") if op.kind == "send" else ("comm_dst", "comm_src")
    missing = [a for a in (other, "comm_tag") if a not in attrs]
    if missing:
        raise ConfigError(f"{where}: missing attribute '{missing[0]}': a {op.kind} needs "
                          f"{other} and comm_tag to say which node it pairs with (as "
                          f"chakra_generator writes them, send / recv nodes carry neither)")
    if _count(attrs, me, where, ctx.rank) != ctx.rank:
        raise ConfigError(f"{where}: {op.kind} issued by rank {ctx.rank} has {me} "
                          f"{attrs[me]}")
    op.peer = _count(attrs, other, where)
    if op.peer >= ctx.npus:
        raise ConfigError(f"{where}: {other} {op.peer} is outside the network's NPUs "
                          f"0..{ctx.npus - 1}")
    op.tag = _count(attrs, "comm_tag", where)


def _read_extras(op: Op, attrs: dict, where: str) -> None:
    if "flowsim_duration_ns" in attrs:
        op.duration_ns = _number(attrs, "flowsim_duration_ns", where)
    for name_, default in _EXTRAS:
        name = f"flowsim_{name_.rstrip('_')}"
        if name not in attrs:
            continue
        value = attrs[name]
        if isinstance(default, float):
            value = _number(attrs, name, where)
        elif name_ == "layer":
            if isinstance(value, bool) or not isinstance(value, Integral) or value < -1:
                raise ConfigError(f"{where}: attribute '{name}': expected a layer index, "
                                  f"found {describe(value)}")
        elif value not in (PRIORITIES if name_ == "priority" else ("", *PASSES)):
            raise ConfigError(f"{where}: attribute '{name}': unexpected value "
                              f"{describe(value)}")
        setattr(op, name_, value)


def _flag(attrs: dict, name: str, where: str) -> bool:
    """A boolean attribute: bool, or an integer 0 / 1 (symbolic_tensor_graph writes
    ``is_cpu_op`` as int32)."""
    value = attrs.get(name, False)
    if value not in (0, 1) or not isinstance(value, (bool, Integral)):
        raise ConfigError(f"{where}: attribute '{name}': expected a bool, found "
                          f"{describe(value)}")
    return bool(value)


def _number(attrs: dict, name: str, where: str, default: Any = ...,
            limit: float = DURATION_NS.maximum) -> float:
    """A finite attribute value in ``[0, limit]`` (the toolkit's number, worded for
    attributes)."""
    value = attrs.get(name, default)
    if value is ...:
        raise ConfigError(f"{where}: missing attribute '{name}'")
    if type(value) in (int, float) and 0 <= value <= limit:    # the common case, fast
        return float(value)
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


def group_key(name: str) -> str:
    """ASTRA-sim reads communicator ids with ``std::stoi``: ``"01"`` is ``"1"`` (done on the
    text, so a thousand-digit id is just an unknown communicator)."""
    name = name.strip()
    if name.isdecimal() and name.isascii():
        return name.lstrip("0") or "0"
    return name
