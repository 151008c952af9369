"""Writing a workload as flowsim's YAML graph format (see :mod:`.yaml_graph`), so that
:func:`~.yaml_graph.read_workload_yaml` reads it back equal."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from .._io import write_text_atomic
from ..errors import ConfigError
from .graph import Op, Workload


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
