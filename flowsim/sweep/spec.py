"""Sweep specs: a base configuration plus axes, expanded into a grid of points.

A spec is YAML (or a mapping)::

    base:
      network: r4_fc8_sw4            # path (relative to the spec), bundled name or mapping
      system: ring_4chunks_3d        # optional, same forms
      collective: all_reduce
      size: 64MiB
      model: analytical
    axes:                            # a Cartesian grid, one dimension per key
      network.bandwidth[2]: [25, 50, 100]   # one element of a per-dimension list
      size: [1MiB, 64MiB]
      model: [analytical, flow]
    zip:                             # named groups of keys varied together (one dimension)
      shape:
        network.topology: [[Ring, Switch], [Ring, Ring]]
        network.npus_count: [[8, 16], [8, 16]]

Keys: ``network.<key>`` and ``system.<key>`` (with an optional ``[i]`` index into a list)
override that config; ``collective``, ``size``, ``model``, ``dims``, ``root`` the
collective's parameters. The keys, list indices and sizes of every axis value are checked
when the spec is loaded, so an index past a list's end, an unknown key or a bad size fails
before anything runs; a point whose configuration is otherwise invalid runs as an error
entry.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .._io import read_mapping
from ..errors import ConfigError
from ..resources import resolve_config_path
from ..system.config import _COMPUTE_KEYS, _MODELLED, _NOT_MODELLED, IMPLEMENTATION_KEYS
from ..topology.config import _KNOWN_KEYS as NETWORK_KEYS

#: Top-level keys of ``base`` (and of axes that address them).
POINT_KEYS = ("network", "system", "collective", "size", "model", "dims", "root")
SYSTEM_KEYS = set(_MODELLED) | set(_NOT_MODELLED) | set(_COMPUTE_KEYS) | set(
    IMPLEMENTATION_KEYS.values())
_KEY = re.compile(r"^(network|system)\.([A-Za-z0-9_-]+)(?:\[(\d+)\])?$")


@dataclass(frozen=True)
class Axis:
    """One grid dimension: a name and, per key it sets, the values along it."""

    name: str
    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]  # values[i][j]: key j at position i

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the resolved base point and the axes of the grid."""

    base: dict
    axes: tuple[Axis, ...]
    source: str
    text: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def digest(self) -> str:
        """Identity of the sweep (resolved base and axes), shared by all its shards."""
        payload = json.dumps({"base": self.base,
                              "axes": [[a.name, a.keys, a.values] for a in self.axes]},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def point(self, index: int) -> dict:
        """The configuration of grid point ``index`` (C order over the axes)."""
        position = [int(i) for i in _unravel(index, self.shape)]
        point = copy.deepcopy(self.base)
        for axis, i in zip(self.axes, position):
            for key, value in zip(axis.keys, axis.values[i]):
                apply_override(point, key, value, self.source)
        return point


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return out[::-1]


def dimension_name(key: str) -> str:
    """``network.bandwidth[2]`` -> ``network_bandwidth_2``: a valid Dataset dimension name."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


def apply_override(point: dict, key: str, value: Any, source: str) -> None:
    """Set ``key`` (``size``, ``network.bandwidth[1]``, ...) of a resolved point in place."""
    if key in POINT_KEYS and key not in ("network", "system"):
        point[key] = value
        return
    match = _KEY.match(key)
    if match is None:
        raise ConfigError(f"{source}: key '{key}': expected one of {', '.join(POINT_KEYS)} or "
                          f"network.<key>[i] / system.<key>[i]")
    section, name, index = match.group(1), match.group(2), match.group(3)
    known = NETWORK_KEYS if section == "network" else SYSTEM_KEYS
    if name not in known:
        raise ConfigError(f"{source}: key '{key}': unknown {section} key '{name}' (expected "
                          f"one of {', '.join(sorted(known))})")
    config = point[section]
    if index is None:
        config[name] = copy.deepcopy(value)
        return
    current = config.get(name)
    if not isinstance(current, list):
        raise ConfigError(f"{source}: key '{key}': {section} key '{name}' is not a list in "
                          f"the base, found {current!r}")
    i = int(index)
    if i >= len(current):
        raise ConfigError(f"{source}: key '{key}': index {i} is past the end of {name} "
                          f"(length {len(current)})")
    current[i] = copy.deepcopy(value)


def _resolve_config(value: Any, kind: str, folder: Path, source: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: key 'base.{kind}': expected a path, a bundled name or a "
                          f"mapping, found {value!r}")
    path = Path(value)
    if not path.is_absolute() and (folder / path).is_file():
        path = folder / path
    what = "network config" if kind == "network" else "system config"
    return read_mapping(resolve_config_path(path, kind=kind), what=what)


def _values(raw: Any, key: str, source: str) -> tuple:
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"{source}: axis '{key}': expected a list of values, found {raw!r}")
    if len(raw) == 0:
        raise ConfigError(f"{source}: axis '{key}': expected at least one value, found []")
    return tuple(raw)


def load_spec(spec: str | os.PathLike | Mapping[str, Any]) -> SweepSpec:
    """Read and validate a sweep spec (see the module docstring)."""
    if isinstance(spec, Mapping):
        data, source, folder = dict(spec), "<spec>", Path.cwd()
        text = yaml.safe_dump(data, sort_keys=False)
    else:
        path = Path(spec)
        data = read_mapping(path, what="sweep spec")
        source, folder, text = str(path), path.resolve().parent, path.read_text()
    unknown = set(data) - {"base", "axes", "zip"}
    if unknown:
        raise ConfigError(f"{source}: unknown key '{sorted(unknown)[0]}' (expected base, axes, "
                          f"zip)")
    raw_base = data.get("base")
    if not isinstance(raw_base, Mapping):
        raise ConfigError(f"{source}: key 'base': expected a mapping with network, collective, "
                          f"size, ..., found {raw_base!r}")
    bad = set(raw_base) - set(POINT_KEYS)
    if bad:
        raise ConfigError(f"{source}: key 'base.{sorted(bad)[0]}': unknown (expected "
                          f"{', '.join(POINT_KEYS)})")
    if "network" not in raw_base:
        raise ConfigError(f"{source}: missing key 'base.network': expected a network config")
    base = {
        "network": _resolve_config(raw_base["network"], "network", folder, source),
        "system": _resolve_config(raw_base.get("system"), "system", folder, source),
        "collective": raw_base.get("collective", "all_reduce"),
        "size": raw_base.get("size", "64MiB"),
        "model": raw_base.get("model", "analytical"),
        "dims": raw_base.get("dims"),
        "root": raw_base.get("root", 0),
    }
    axes: list[Axis] = []
    raw_axes = data.get("axes") or {}
    if not isinstance(raw_axes, Mapping):
        raise ConfigError(f"{source}: key 'axes': expected a mapping of key -> list of values")
    for key, raw in raw_axes.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: axis {key!r}: expected a key such as 'size' or "
                              f"'network.bandwidth[1]'")
        values = _values(raw, key, source)
        axes.append(Axis(dimension_name(key), (key,), tuple((v,) for v in values)))
    raw_zip = data.get("zip") or {}
    if not isinstance(raw_zip, Mapping):
        raise ConfigError(f"{source}: key 'zip': expected a mapping of group name -> "
                          f"mapping of key -> list")
    for name, group in raw_zip.items():
        if not isinstance(group, Mapping) or not group:
            raise ConfigError(f"{source}: zip group '{name}': expected a mapping of key -> list")
        columns = {key: _values(raw, f"{name}.{key}", source) for key, raw in group.items()}
        lengths = {key: len(v) for key, v in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ConfigError(f"{source}: zip group '{name}': lists of unequal length "
                              f"{lengths}")
        keys = tuple(columns)
        axes.append(Axis(dimension_name(str(name)), keys,
                         tuple(zip(*(columns[k] for k in keys)))))
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: two axes share the name(s) "
                          f"{sorted({n for n in names if names.count(n) > 1})}")
    result = SweepSpec(base=base, axes=tuple(axes), source=source, text=text)
    # check every override once (cheap: one point per axis value, not the whole grid)
    from ..units import parse_size
    parse_size(base["size"], source=source, key="base.size")
    for axis in result.axes:
        for row in axis.values:
            probe = copy.deepcopy(base)
            for key, value in zip(axis.keys, row):
                apply_override(probe, key, value, source)
                if key == "size":  # sizes become coordinates: they must parse up front
                    parse_size(value, source=source, key=f"axes.{key}")
    return result
