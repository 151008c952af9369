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

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._io import read_mapping, write_text_atomic
from ..collectives import COLLECTIVES, canonical_collective
from ..errors import ConfigError, config_error, unknown_key_error
from ..units import parse_duration, parse_size
from .graph import OP_KINDS, PASSES, PRIORITIES, Op, Program, Workload, topological_order

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


# ---------------------------------------------------------------------------------- reading
def read_workload_yaml(path: str | os.PathLike, network: Any) -> Workload:
    """Read a YAML graph or generator spec (see the module docstring) for ``network``."""
    return parse_workload_mapping(read_mapping(path, what="workload"), str(path), network)


def parse_workload_mapping(mapping: Mapping, source: str, network: Any) -> Workload:
    """Validate a workload mapping and build its :class:`Workload`.

    Parameters
    ----------
    mapping : Mapping
        A graph (``programs`` or ``ops``) or a generator spec (``generator``).
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
    if "generator" in mapping:
        from .generators import build_generator

        return build_generator(mapping, source, network)
    for key in mapping:
        if key not in TOP_KEYS:
            raise unknown_key_error(source, str(key), TOP_KEYS + ("generator",))
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
    for key in entry:
        if key not in PROGRAM_KEYS:
            raise unknown_key_error(where, str(key), PROGRAM_KEYS)
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
    expected = "'all', an NPU id, a list of NPU ids or {start, stop, step}"
    if value == "all":
        if total is None:
            raise config_error(where, "npus", "explicit NPU ids (no network to take 'all' "
                               "from)", value)
        return np.arange(total)
    if _is_int(value):
        ids = [int(value)]
    elif isinstance(value, list) and value and all(_is_int(v) for v in value):
        ids = [int(v) for v in value]
    elif isinstance(value, Mapping):
        for key in value:
            if key not in ("start", "stop", "step"):
                raise unknown_key_error(where, f"npus.{key}", ("npus.start", "npus.stop",
                                                               "npus.step"))
        if "stop" not in value and total is None:
            raise config_error(where, "npus.stop", "an integer (no network to default to)",
                               ...)
        bounds = {"start": value.get("start", 0), "stop": value.get("stop", total),
                  "step": value.get("step", 1)}
        for key, bound in bounds.items():
            if not _is_int(bound) or bound < (1 if key == "step" else 0):
                raise config_error(where, f"npus.{key}", "an integer >= "
                                   + ("1" if key == "step" else "0"), bound)
        ids = list(range(bounds["start"], bounds["stop"], bounds["step"]))
        if not ids:
            raise config_error(where, "npus", "a range holding at least one NPU",
                               dict(value))
    else:
        raise config_error(where, "npus", expected, value)
    if min(ids) < 0 or (total is not None and max(ids) >= total):
        bad = next(i for i in ids if i < 0 or (total is not None and i >= total))
        limit = f" (the network has NPUs 0..{total - 1})" if total is not None else ""
        raise config_error(where, "npus", f"NPU ids inside the network{limit}", bad)
    if len(set(ids)) != len(ids):
        raise config_error(where, "npus", "distinct NPU ids", value)
    return np.array(ids, dtype=np.int64)


def _op(spec: Any, where: str, layers: list[str], declared: bool) -> Op:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping of op keys, found "
                          f"{type(spec).__name__}")
    if "id" not in spec:
        raise config_error(where, "id", "an integer >= 0, unique in the program", ...)
    op_id = spec["id"]
    if not _is_int(op_id) or op_id < 0:
        raise config_error(where, "id", "an integer >= 0, unique in the program", op_id)
    op_id = int(op_id)
    where = f"{where} (id {op_id})"
    kind = spec.get("kind", ...)
    if kind not in OP_KINDS:
        raise config_error(where, "kind", "one of " + ", ".join(OP_KINDS), kind)
    allowed = COMMON_KEYS + KIND_KEYS[kind]
    for key in spec:
        if key not in allowed:
            raise unknown_key_error(where, str(key), allowed)
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
        if spec["pass"] not in PASSES:
            raise config_error(where, "pass", "one of " + ", ".join(PASSES), spec["pass"])
        fields["pass_"] = spec["pass"]
    if "flops" in spec:
        fields["flops"] = _number(spec["flops"], where, "flops")
    key, value = spelled("bytes")
    if value is not ...:
        # a size with units, or a plain number (a roofline's byte count may be fractional)
        if isinstance(value, str) and not _is_float_text(value):
            fields["mem_bytes"] = float(parse_size(value, source=where, key=key,
                                                   allow_zero=True))
        else:
            fields["mem_bytes"] = _number(value, where, key)
    if "size" in spec:
        fields["size"] = parse_size(spec["size"], source=where, key="size", allow_zero=True)
    if kind == "collective":
        fields.update(_collective_fields(spec, where))
    if kind in ("send", "recv"):
        fields.update(_peer_fields(spec, where, kind))
    if "remote" in spec:
        if not isinstance(spec["remote"], bool):
            raise config_error(where, "remote", "true or false", spec["remote"])
        fields["remote"] = spec["remote"]
    return Op(**fields)


def _peer_fields(spec: Mapping, where: str, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "peer" in spec and "peer_offset" in spec:
        raise ConfigError(f"{where}: give one of 'peer' and 'peer_offset', not both")
    if "peer" not in spec and "peer_offset" not in spec:
        raise config_error(where, "peer_offset", f"the peer of the {kind}: 'peer_offset' "
                           "(added to each NPU of the program) or 'peer' (an NPU id)", ...)
    if "peer" in spec:
        if not _is_int(spec["peer"]) or spec["peer"] < 0:
            raise config_error(where, "peer", "an NPU id (an integer >= 0)", spec["peer"])
        out["peer"] = int(spec["peer"])
    else:
        if not _is_int(spec["peer_offset"]) or spec["peer_offset"] == 0:
            raise config_error(where, "peer_offset", "a non-zero integer",
                               spec["peer_offset"])
        out["peer_offset"] = int(spec["peer_offset"])
    if "tag" in spec:
        if not _is_int(spec["tag"]):
            raise config_error(where, "tag", "an integer", spec["tag"])
        out["tag"] = int(spec["tag"])
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
        by_lower = {p.lower(): p for p in PRIORITIES}
        value = spec["priority"]
        if not isinstance(value, str) or value.lower() not in by_lower:
            raise config_error(where, "priority", "one of " + ", ".join(PRIORITIES), value)
        out["priority"] = by_lower[value.lower()]
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
    items = [value] if _is_int(value) else value
    if not isinstance(items, list) or not all(_is_int(v) and v >= 0 for v in items) \
            or (not items and not allow_empty):
        raise config_error(where, key, f"a list of {what} (integers >= 0)", value)
    return tuple(int(v) for v in items)


def _number(value: Any, where: str, key: str) -> float:
    """A finite number >= 0; strings such as ``"1e12"`` too (YAML 1.1 reads them as text)."""
    number = None
    if _is_float_text(value):
        number = float(value)
    elif isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, bool):
        number = float(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise config_error(where, key, "a finite number >= 0", value)
    return number


_FLOAT_TEXT = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*$")


def _is_float_text(value: Any) -> bool:
    return isinstance(value, str) and _FLOAT_TEXT.match(value) is not None


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)


# ---------------------------------------------------------------------------------- writing
def write_workload_yaml(workload: Workload, path: str | os.PathLike) -> None:
    """Write ``workload`` as a YAML graph that :func:`read_workload_yaml` reads back equal.

    Every program is written with its NPU ids (a range when they are evenly spaced), every op
    on one line with the fields its kind uses (fields a kind ignores are not written).
    """
    write_text_atomic(path, format_workload_yaml(workload))


def format_workload_yaml(workload: Workload) -> str:
    """The YAML text of :func:`write_workload_yaml`."""
    lines = ["# flowsim workload graph (see flowsim.workload.yaml_graph)",
             f"name: {_scalar(workload.name)}"]
    if workload.layers:
        lines.append(f"layers: {_scalar(list(workload.layers))}")
    lines.append("programs:")
    for program in workload.programs:
        lines.append(f"  - npus: {_npus_text(program.npus)}")
        lines.append("    ops:")
        for op in program.ops:
            fields = _op_fields(op, workload.layers, program.source)
            lines.append("      - {" + ", ".join(f"{k}: {_scalar(v)}"
                                                 for k, v in fields.items()) + "}")
    return "\n".join(lines) + "\n"


def _op_fields(op: Op, layers: list[str], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": int(op.id), "kind": op.kind}
    if op.name:
        out["name"] = op.name
    if op.kind == "compute":
        for key, value in (("duration_ns", op.duration_ns), ("flops", op.flops),
                           ("bytes", op.mem_bytes)):
            if value:
                out[key] = float(value)
    elif op.kind == "collective":
        out["collective"] = op.collective
        out["size"] = int(op.size)
        if op.group:
            out["group"] = [int(r) for r in op.group]
        elif op.dims is not None:
            out["dims"] = [int(d) for d in op.dims]
        if op.update_delay_ns:
            out["update_delay_ns"] = float(op.update_delay_ns)
        if op.priority != "default":
            out["priority"] = op.priority
    elif op.kind in ("send", "recv"):
        if op.peer is not None:
            out["peer"] = int(op.peer)
        else:
            out["peer_offset"] = int(op.peer_offset or 0)
        if op.tag:
            out["tag"] = int(op.tag)
        if op.size or op.kind == "send":
            out["size"] = int(op.size)
    elif op.kind == "memory":
        out["size"] = int(op.size)
        if op.remote:
            out["remote"] = True
    if op.deps:
        out["deps"] = [int(d) for d in op.deps]
    if op.ctrl_deps:
        out["ctrl_deps"] = [int(d) for d in op.ctrl_deps]
    if op.gap_ns:
        out["gap_ns"] = float(op.gap_ns)
    if op.layer >= 0:
        if op.layer >= len(layers):
            raise ConfigError(f"{source}: node {op.id} has layer index {op.layer}, but the "
                              f"workload names {len(layers)} layers")
        out["layer"] = layers[op.layer]
    if op.pass_:
        out["pass"] = op.pass_
    return out


def _npus_text(npus: np.ndarray) -> str:
    ids = [int(n) for n in npus]
    if len(ids) > 2:
        step = ids[1] - ids[0]
        if step > 0 and all(b - a == step for a, b in zip(ids, ids[1:])):
            tail = f", step: {step}" if step != 1 else ""
            return f"{{start: {ids[0]}, stop: {ids[-1] + step}{tail}}}"
    return _scalar(ids)


#: Plain YAML scalars that read back as the same string (YAML 1.1 keywords excluded).
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_KEYWORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _scalar(value: Any) -> str:
    """One value in YAML flow style, read back by ``yaml.safe_load`` as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        text = repr(value)
        mantissa, _, exponent = text.partition("e")
        if exponent and "." not in mantissa:
            text = f"{mantissa}.0e{exponent}"  # YAML 1.1 floats need a dot
        if exponent and exponent[0] not in "+-":
            text = text.replace("e", "e+")
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _KEYWORDS:
        return text
    return json.dumps(text, ensure_ascii=False)
