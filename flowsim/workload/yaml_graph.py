"""flowsim's own workload format: a graph of ops written by hand in YAML (or a dict).

A file holds either a graph or a generator spec (``generator: transformer``, then that
generator's keys; see :mod:`flowsim.workload.generators`). A graph::

    name: two-layer data parallel
    layers: [L0, L1]          # optional: names for the per-layer breakdown, in order
    programs:                 # optional; `ops:` at the top level is one program on all NPUs
      - npus: all             # "all", an id, a list of ids, or {start: 0, stop: 8, step: 2}
        ops:
          - {id: 0, kind: compute, name: fwd0, duration: 1us, layer: L0, pass: fwd}
          - {id: 1, kind: collective, collective: all-reduce, size: 1MiB, deps: [0]}

Keys of every op: ``id`` (an integer >= 0, unique in its program), ``kind``, ``name``,
``deps`` and ``ctrl_deps`` (ids), ``gap`` (after the control dependencies), ``layer`` (a name
of ``layers``; without ``layers`` the names are collected in order of appearance), ``pass``
(``fwd``, ``ig`` or ``wg``). Then by kind:

==============  =================================================================================
``compute``     ``duration`` or ``flops`` and ``bytes`` (timed by the run's roofline)
``collective``  ``collective`` (``all-reduce``, ``AllGather``, ...), ``size``, ``dims`` (list,
                default all) or ``group`` (NPU ids), ``update_delay``, ``priority``
``send``        ``size``, ``peer`` (absolute, one-NPU programs) or ``peer_offset``, ``tag``
``recv``        ``peer`` or ``peer_offset``, ``tag``, optional ``size``
``memory``      ``size``, ``remote`` (true: remote memory)
==============  =================================================================================

Sizes are bytes or strings with units (``64KiB``, ``1GB``); durations are ns or strings with
units (``2us``, ``1.5ms``). ``duration_ns``, ``gap_ns``, ``update_delay_ns`` and
``mem_bytes`` are accepted as the :class:`~flowsim.workload.graph.Op` field names of
``duration``, ``gap``, ``update_delay`` and ``bytes``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._io import read_mapping
from .._validate import (
    FLOPS,
    MAX_INT,
    SIZE_BYTES,
    as_bool,
    as_choice,
    as_int,
    as_number,
    check_unknown_keys,
)
from ..collectives import COLLECTIVES, canonical_collective
from ..errors import ConfigError, ConfigTypeError, config_error
from ..topology.network_config import MAX_NPUS
from ..units import parse_duration, parse_size
from .graph import OP_KINDS, PASSES, PRIORITIES, Op, Program, Workload, topological_order
from .yaml_writer import format_workload_yaml, write_workload_yaml  # noqa: F401 (re-exported)

TOP_KEYS = ("name", "layers", "programs", "ops")
PROGRAM_KEYS = ("npus", "ops", "name")
#: Keys every op may have.
COMMON_KEYS = ("id", "kind", "name", "deps", "ctrl_deps", "gap", "gap_ns", "layer", "pass")
#: Further keys by kind.
KIND_KEYS = {
    "compute": ("duration", "duration_ns", "flops", "bytes", "mem_bytes"),
    "collective": ("collective", "size", "dims", "group", "update_delay", "update_delay_ns",
                   "priority"),
    "send": ("size", "peer", "peer_offset", "tag"),
    "recv": ("size", "peer", "peer_offset", "tag"),
    "memory": ("size", "remote"),
}
#: Two spellings of one field: the short one and the Op field name.
_SPELLINGS = {"duration_ns": "duration", "gap_ns": "gap", "update_delay_ns": "update_delay",
              "mem_bytes": "bytes"}
_LONG = {short: long for long, short in _SPELLINGS.items()}
_REQUIRED = {"collective": ("collective", "size"), "send": ("size",), "memory": ("size",)}
_USER_COLLECTIVES = tuple(c for c in COLLECTIVES if c != "send_recv")
#: Message tags: as Chakra's (signed 64-bit) allow.
MAX_TAG = 2**62


# ---------------------------------------------------------------------------------- reading
def read_workload_yaml(path: str | os.PathLike, network: Any) -> Workload:
    """Read a YAML graph or generator spec (see the module docstring) for ``network``."""
    return parse_workload_mapping(read_mapping(path, what="workload"), str(path), network)


class SpecFromFile(dict):
    """A generator spec read from a YAML file into a mapping (a sweep varies its keys) that
    remembers the file, so that the files the spec names (``config:``, ``script:``) are
    found beside it wherever the run starts, as they are when the file is given."""

    def __init__(self, data: Mapping, path: str) -> None:
        super().__init__(data)
        self.path = path


def parse_workload_mapping(mapping: Mapping, source: str, network: Any) -> Workload:
    """Validate a workload mapping and build its :class:`Workload`.

    Parameters
    ----------
    mapping : Mapping
        A graph (``programs`` or ``ops``), a generator spec (``generator``), or a
        Megatron-Bridge ``run_config.yaml`` as saved (its ``ConfigContainer`` ``_target_``:
        read by ``generator: megatron_bridge``).
    source : str
        Where the mapping came from (a file path, ``"<dict>"``), for error messages.
    network : Network or None
        The network the workload runs on (``npus: all`` and the default program need it).

    Raises
    ------
    ConfigError
        Any key or value that is not part of the format; the message names ``source``, the op
        (its index and id) and the key, and what was expected.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{source}: expected a mapping of workload keys, "
                          f"found {type(mapping).__name__}")
    if "generator" in mapping or not mapping.keys() <= set(TOP_KEYS):   # not a graph
        from .generators import build_generator, generator_spec

        spec = generator_spec(mapping, source)
        if spec is not None:
            return build_generator(spec, source, network)
    check_unknown_keys(mapping, TOP_KEYS + ("generator",), source=source)
    name = mapping.get("name", Path(source).stem if source != "<dict>" else "workload")
    if not isinstance(name, str) or not name:
        raise config_error(source, "name", "a non-empty string", name)
    declared = _layers(mapping, source)
    layers = list(declared) if declared is not None else []
    if ("programs" in mapping) == ("ops" in mapping):
        raise ConfigError(f"{source}: give either 'programs' (a list of {{npus, ops}}) or "
                          "'ops' (one program run by every NPU), not "
                          + ("both" if "programs" in mapping else "neither"))
    if "ops" in mapping:
        specs = [({"npus": "all", "ops": mapping["ops"]}, "", source)]
    else:
        entries = mapping["programs"]
        if not isinstance(entries, list) or not entries:
            raise config_error(source, "programs", "a non-empty list of {npus, ops} mappings",
                               entries)
        specs = [(entry, f"programs[{k}]", f"{source}: programs[{k}]")
                 for k, entry in enumerate(entries)]
    programs = [_program(entry, prefix, source, label, network, layers, declared is not None)
                for entry, prefix, label in specs]
    return Workload(programs, layers, name)


def _layers(mapping: Mapping, source: str) -> list[str] | None:
    if "layers" not in mapping:
        return None
    value = mapping["layers"]
    if not isinstance(value, list) or not all(_is_name(v) for v in value):
        raise config_error(source, "layers", "a list of layer names", value)
    names = [str(v) for v in value]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise config_error(source, "layers", "distinct layer names",
                           f"{repeated[0]!r} more than once")
    return names


def _program(entry: Any, prefix: str, source: str, label: str, network: Any,
             layers: list[str], declared: bool) -> Program:
    where = f"{source}: {prefix}" if prefix else source
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a mapping with keys npus and ops, "
                          f"found {type(entry).__name__}")
    check_unknown_keys(entry, PROGRAM_KEYS, source=where)
    if "ops" not in entry:
        raise config_error(where, "ops", "a list of op mappings", ...)
    if "name" in entry and not _is_name(entry["name"]):
        raise config_error(where, "name", "a string", entry["name"])
    npus = _npus(entry.get("npus", "all"), where, network)
    ops_value = entry["ops"]
    ops_key = f"{prefix}.ops" if prefix else "ops"
    if not isinstance(ops_value, list) or not ops_value:
        raise config_error(source, ops_key, "a non-empty list of op mappings", ops_value)
    ops: list[Op] = []
    seen: dict[int, int] = {}
    for index, spec in enumerate(ops_value):
        op = _op(spec, f"{source}: {ops_key}[{index}]", layers, declared)
        if op.id in seen:
            raise config_error(f"{source}: {ops_key}[{index}] (id {op.id})", "id",
                               "an id no other op of the program has",
                               f"{op.id}, already the id of {ops_key}[{seen[op.id]}]")
        seen[op.id] = index
        ops.append(op)
    for index, op in enumerate(ops):
        for key in ("deps", "ctrl_deps"):
            missing = [d for d in getattr(op, key) if d not in seen]
            if missing:
                raise config_error(f"{source}: {ops_key}[{index}] (id {op.id})", key,
                                   "ids of ops of this program",
                                   f"{missing[0]}, which no op has")
    if entry.get("name"):
        label = f"{label} ({entry['name']})"
    program = Program(ops, npus, label)
    topological_order(program)  # names the ops of a dependency cycle
    return program


def _npus(value: Any, where: str, network: Any) -> np.ndarray:
    total = getattr(network, "npus", None)
    limit = MAX_NPUS if total is None else total
    expected = "'all', an NPU id, a list of NPU ids or {start, stop, step}"
    if isinstance(value, str) and value == "all":
        if total is None:
            raise config_error(where, "npus", "explicit NPU ids (no network to take 'all' "
                               "from)", value)
        return np.arange(total)
    if isinstance(value, Mapping):
        check_unknown_keys(value, ("start", "stop", "step"), source=where, prefix="npus.")
        if "stop" not in value and total is None:
            raise config_error(where, "npus.stop", "an integer (no network to default to)",
                               ...)
        start = as_int(value.get("start", 0), source=where, key="npus.start", minimum=0,
                       maximum=limit)
        stop = as_int(value.get("stop", total), source=where, key="npus.stop", minimum=0,
                      maximum=limit)
        step = as_int(value.get("step", 1), source=where, key="npus.step", minimum=1,
                      maximum=limit)
        ids = list(range(start, stop, step))  # bounded: stop is at most the NPU count
        if not ids:
            raise config_error(where, "npus", "a range holding at least one NPU",
                               dict(value))
    elif _is_int(value):
        ids = [int(value)]
    elif isinstance(value, list) and value and all(_is_int(v) for v in value):
        ids = [int(v) for v in value]
    else:
        raise config_error(where, "npus", expected, value,
                           cls=ConfigError if isinstance(value, (str, list)) else
                           ConfigTypeError)
    bad = next((i for i in ids if not 0 <= i < limit), None)
    if bad is not None:
        inside = f" (the network has NPUs 0..{total - 1})" if total is not None else ""
        raise config_error(where, "npus", f"NPU ids inside the network{inside}", bad)
    if len(set(ids)) != len(ids):
        raise config_error(where, "npus", "distinct NPU ids", value)
    return np.array(ids, dtype=np.int64)


def _op(spec: Any, where: str, layers: list[str], declared: bool) -> Op:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping of op keys, found "
                          f"{type(spec).__name__}")
    if "id" not in spec:
        raise config_error(where, "id", "an integer >= 0, unique in the program", ...)
    op_id = as_int(spec["id"], source=where, key="id", minimum=0)
    where = f"{where} (id {op_id})"
    if "kind" not in spec:
        raise config_error(where, "kind", "one of " + ", ".join(OP_KINDS), ...)
    kind = as_choice(spec["kind"], OP_KINDS, source=where, key="kind")
    check_unknown_keys(spec, COMMON_KEYS + KIND_KEYS[kind], source=where)
    for long, short in _SPELLINGS.items():
        if long in spec and short in spec:
            raise ConfigError(f"{where}: give one of '{short}' and '{long}', not both")
    for key in _REQUIRED.get(kind, ()):
        if key not in spec:
            raise config_error(where, key, f"a value (a {kind} op needs '{key}')", ...)

    def spelled(short: str) -> tuple[str, Any]:
        """The key as written and its value (``...`` if absent) of a two-spelling field."""
        long = _LONG[short]
        return (long, spec[long]) if long in spec else (short, spec.get(short, ...))

    fields: dict[str, Any] = {"id": op_id, "kind": kind}
    name = spec.get("name", ...)
    if name is not ...:
        if not _is_name(name):
            raise config_error(where, "name", "a string", name)
        fields["name"] = str(name)
    for key in ("deps", "ctrl_deps"):
        if key in spec:
            fields[key] = _ids(spec[key], where, key, "op ids")
    for short, field in (("gap", "gap_ns"), ("duration", "duration_ns"),
                         ("update_delay", "update_delay_ns")):
        key, value = spelled(short)
        if value is not ...:
            fields[field] = parse_duration(value, source=where, key=key)
    if "layer" in spec:
        fields["layer"] = _layer(spec["layer"], where, layers, declared)
    if "pass" in spec:
        fields["pass_"] = as_choice(spec["pass"], PASSES, source=where, key="pass")
    if "flops" in spec:
        fields["flops"] = as_number(spec["flops"], source=where, key="flops", quantity=FLOPS,
                                    text=True)
    key, value = spelled("bytes")
    if value is not ...:
        # a size with units, or a plain number (a roofline's byte count may be fractional)
        try:
            fields["mem_bytes"] = as_number(value, source=where, key=key, quantity=SIZE_BYTES,
                                            text=True)
        except ConfigError:
            if not isinstance(value, str):
                raise
            fields["mem_bytes"] = float(parse_size(value, source=where, key=key,
                                                   allow_zero=True))
    if "size" in spec:
        fields["size"] = parse_size(spec["size"], source=where, key="size", allow_zero=True)
    if kind == "collective":
        fields.update(_collective_fields(spec, where))
    if kind in ("send", "recv"):
        fields.update(_peer_fields(spec, where, kind))
    if "remote" in spec:
        fields["remote"] = as_bool(spec["remote"], source=where, key="remote")
    return Op(**fields)


def _peer_fields(spec: Mapping, where: str, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "peer" in spec and "peer_offset" in spec:
        raise ConfigError(f"{where}: give one of 'peer' and 'peer_offset', not both")
    if "peer" not in spec and "peer_offset" not in spec:
        raise config_error(where, "peer_offset", f"the peer of the {kind}: 'peer_offset' "
                           "(added to each NPU of the program) or 'peer' (an NPU id)", ...)
    if "peer" in spec:
        out["peer"] = as_int(spec["peer"], source=where, key="peer", minimum=0,
                             maximum=MAX_NPUS - 1)
    else:
        offset = as_int(spec["peer_offset"], source=where, key="peer_offset",
                        minimum=-MAX_NPUS, maximum=MAX_NPUS)
        if offset == 0:
            raise config_error(where, "peer_offset", "a non-zero integer", offset)
        out["peer_offset"] = offset
    if "tag" in spec:
        out["tag"] = as_int(spec["tag"], source=where, key="tag", minimum=-MAX_TAG,
                            maximum=MAX_TAG)
    return out


def _collective_fields(spec: Mapping, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = canonical_collective(spec["collective"])
    if kind not in _USER_COLLECTIVES:
        raise config_error(where, "collective", "one of " + ", ".join(
            c.replace("_", "-") for c in _USER_COLLECTIVES), spec["collective"])
    out["collective"] = kind
    if "dims" in spec and "group" in spec:
        raise ConfigError(f"{where}: give one of 'dims' and 'group', not both")
    dims = spec.get("dims")
    if dims is not None and dims != "all":
        out["dims"] = _ids(dims, where, "dims", "dimension indices", allow_empty=True)
    if "group" in spec:
        group = _ids(spec["group"], where, "group", "NPU ids")
        if len(group) < 2 or len(set(group)) != len(group):
            raise config_error(where, "group", "at least 2 distinct NPU ids", spec["group"])
        out["group"] = group
    if "priority" in spec:
        out["priority"] = as_choice(spec["priority"], PRIORITIES, source=where, key="priority",
                                    case_insensitive=True)
    return out


def _layer(value: Any, where: str, layers: list[str], declared: bool) -> int:
    if not _is_name(value):
        raise config_error(where, "layer", "a layer name", value)
    name = str(value)
    if name in layers:
        return layers.index(name)
    if declared:
        raise config_error(where, "layer", "one of the names in 'layers' ("
                           + ", ".join(layers[:8]) + (", ..." if len(layers) > 8 else "")
                           + ")", value)
    layers.append(name)
    return len(layers) - 1


def _ids(value: Any, where: str, key: str, what: str, *,
         allow_empty: bool = True) -> tuple[int, ...]:
    """A list of ids (integers >= 0; a single id is a list of one)."""
    expected = f"a list of {what} (integers >= 0)"
    items = [value] if _is_int(value) else value
    if not isinstance(items, list) or not all(_is_int(v) and 0 <= v <= MAX_INT for v in items) \
            or (not items and not allow_empty):
        raise config_error(where, key, expected, value,
                           cls=ConfigError if isinstance(items, list) else ConfigTypeError)
    return tuple(int(v) for v in items)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)
