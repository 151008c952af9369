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
override that config, ``network.cluster.<key>`` a key of its ``cluster:`` block (a cluster
preset's ``nodes``, ``device``, ``nic_gbps``, ...), and ``network`` or ``system`` replace it
whole (paths, bundled names or mappings, read when the spec is loaded: ``network: [dgx_h100,
dgx_a100_superpod]``); ``collective``, ``size``, ``model``, ``dims``, ``root`` the
collective's parameters. The keys, list indices and sizes of every axis value are checked
when the spec is loaded, so an index past a list's end, an unknown key or a bad size fails
before anything runs; a point whose configuration is otherwise invalid runs as an error
entry.

A base with ``workload:`` makes a sweep of training runs (``flowsim.simulate``) instead of
collectives::

    base:
      network: hier_128
      workload: {generator: dlrm, batch_per_npu: 512}   # or a path / bundled name
      iterations: 2
    axes:
      workload.batch_per_npu: [256, 512]
      system.endpoint-delay: [10, 1000]

Its keys are ``network``, ``system``, ``workload``, ``iterations`` and ``model``;
``workload.<key>`` (optional ``[i]``) overrides a key of a generator spec (a workload given
as a path to a generator YAML is read into a mapping for that), and every generator spec the
grid reaches is validated when the spec is loaded.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .._io import check_structure, read_mapping, read_text
from ..errors import ConfigError, ConfigTypeError, describe
from ..resources import bundled_dir, resolve_config_path
from .overrides import (
    POINT_KEYS,
    WORKLOAD_POINT_KEYS,
    apply_settings,
    config_key,
    whole_config_bases,
)

#: Most points a sweep may have (the grid is the product of its axes' lengths).
MAX_POINTS = 1 << 20
#: Names of the result variables and dimensions a sweep Dataset holds: no axis may take them.
RESERVED_NAMES = frozenset({"time_ns", "total_link_bytes", "max_link_utilization", "flows",
                            "compute_ns", "exposed_comm_ns", "blocked_comm_ns", "error",
                            "point"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    #: the network and system configs whole-config axes name, resolved when the spec was
    #: loaded (so that a point never reads a file): :func:`config_key` -> mapping
    configs: dict[str, dict] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def kind(self) -> str:
        """``"workload"`` (training runs, :func:`flowsim.simulate`) or ``"collective"``."""
        return "workload" if "workload" in self.base else "collective"

    @property
    def digest(self) -> str:
        """Identity of the sweep (resolved base and axes), shared by all its shards."""
        # a generator YAML's folder names its files: the same keys in another folder are
        # another sweep
        folder = getattr(self.base.get("workload"), "path", None)
        payload = json.dumps({"base": self.base,
                              "axes": [[a.name, a.keys, a.values] for a in self.axes],
                              **({"configs": self.configs} if self.configs else {}),
                              **({"workload_file": folder} if folder else {})},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def point(self, index: int) -> dict:
        """The configuration of grid point ``index`` (C order over the axes)."""
        position = [int(i) for i in _unravel(index, self.shape)]
        point = copy.deepcopy(self.base)
        settings = [(key, value) for axis, i in zip(self.axes, position)
                    for key, value in zip(axis.keys, axis.values[i])]
        apply_settings(point, settings, self.source, self.configs)
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


def resolve_config(value: Any, kind: str, folder: Path, source: str) -> dict:
    """A network or system config (``kind``) as a mapping: ``value`` itself, or the file a
    path (relative to ``folder`` first) or a bundled name gives; None is empty."""
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
    resolved = resolve_config_path(path, kind=kind)
    if kind == "system" and resolved.suffix == ".txt":   # its keys are not 2.x json's
        raise ConfigError(f"{source}: {value}: an ASTRA-sim 1.0 system file is read whole "
                          f"by flowsim run and collective; a sweep or --set needs a 2.x "
                          f"system json (the same settings under 2.x keys)")
    return read_mapping(resolved, what=what)


def _axis_config(value: Any, kind: str, folder: Path, source: str) -> dict:
    """A whole-config axis value (path, bundled name or mapping) read as the base's is; an
    error names the axis."""
    if not isinstance(value, (str, os.PathLike, Mapping)):
        raise ConfigError(f"{source}: axis '{kind}': expected a path, a bundled name or a "
                          f"mapping, found {value!r}")
    try:
        return resolve_config(value, kind, folder, source)
    except ConfigError as exc:
        raise ConfigError(f"{source}: axis '{kind}': {exc}") from None


def resolve_workload(value: Any, folder: Path, source: str) -> Any:
    """A generator spec as a mapping (read from its YAML file when given as a path or a
    bundled name, so that axes can vary its keys); any other workload as a path string."""
    from ..workload.yaml_graph import SpecFromFile

    if isinstance(value, Mapping):   # written in the sweep file: its files beside that
        data = copy.deepcopy(dict(value))
        return SpecFromFile(data, str(Path(source).resolve())) \
            if "generator" in data and Path(source).is_file() else data
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: key 'base.workload': expected a path, a bundled name or "
                          f"a generator mapping, found {value!r}")
    path = Path(value)
    if not path.is_absolute() and (folder / path).exists():
        path = folder / path
    elif not path.exists() and path.name == str(value) and not path.suffix:
        bundled = [bundled_dir("workload") / (path.name + s) for s in (".txt", ".yml", ".yaml")]
        path = next((p for p in bundled if p.is_file()), path)
    if path.suffix in (".yml", ".yaml") and path.is_file():
        data = read_mapping(path, what="workload")
        if "generator" in data:   # the files it names stay beside it
            return SpecFromFile(data, str(path.resolve()))
    return str(path)


def _check_workload(point: dict, source: str) -> None:
    """Validate a point's generator spec (keys and values; the network is checked when the
    point runs)."""
    spec = point["workload"]
    if not isinstance(spec, Mapping) or "generator" not in spec:
        return
    from ..workload.generators import GENERATORS

    name = spec["generator"]
    if not isinstance(name, str) or name not in GENERATORS:
        raise ConfigError(f"{source}: key 'workload.generator': expected one of "
                          f"{', '.join(sorted(GENERATORS))}, found {name!r}")
    params = {key: value for key, value in spec.items() if key != "generator"}
    GENERATORS[name].parse(params, getattr(spec, "path", f"{source}: workload"))


def _base(raw_base: Mapping, folder: Path, source: str) -> dict:
    """The resolved base point: a collective's, or with ``workload`` a training run's."""
    keys = WORKLOAD_POINT_KEYS if "workload" in raw_base else POINT_KEYS
    bad = set(raw_base) - set(keys)
    if bad:
        extra = " with a workload" if "workload" in raw_base else ""
        raise ConfigError(f"{source}: key 'base.{sorted(bad)[0]}': unknown{extra} (expected "
                          f"{', '.join(keys)})")
    if "network" not in raw_base:
        raise ConfigError(f"{source}: missing key 'base.network': expected a network config")
    network = resolve_config(raw_base["network"], "network", folder, source)
    # none given: each point takes its own network's (apply_settings)
    system = resolve_config(raw_base.get("system"), "system", folder, source) \
        if raw_base.get("system") is not None else None
    if "workload" in raw_base:
        return {"network": network, "system": system,
                "workload": resolve_workload(raw_base["workload"], folder, source),
                "iterations": raw_base.get("iterations", 1),
                "model": raw_base.get("model", "analytical")}
    return {
        "network": network,
        "system": system,
        "collective": raw_base.get("collective", "all_reduce"),
        "size": raw_base.get("size", "64MiB"),
        "model": raw_base.get("model", "analytical"),
        "dims": raw_base.get("dims"),
        "root": raw_base.get("root", 0),
    }


def _values(raw: Any, key: str, source: str) -> tuple:
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"{source}: axis '{key}': expected a list of values, found {raw!r}")
    if len(raw) == 0:
        raise ConfigError(f"{source}: axis '{key}': expected at least one value, found []")
    return tuple(raw)


def _check_axes(axes: list[Axis], source: str) -> None:
    """Names the result Dataset can hold, values it can store, a grid of bounded size: all
    checked before any point runs."""
    names = [a.name for a in axes]
    for axis in axes:
        if not _NAME.match(axis.name) or axis.name in RESERVED_NAMES:
            what = f"axis '{axis.keys[0]}'" if len(axis.keys) == 1 else "zip group"
            raise ConfigError(f"{source}: {what}: its name {axis.name!r} cannot name a Dataset "
                              f"dimension (expected letters, digits and '_', not one of "
                              f"{', '.join(sorted(RESERVED_NAMES))})")
        for row in axis.values:
            for key, value in zip(axis.keys, row):
                _check_value(value, source, key)
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: two axes share the name(s) "
                          f"{sorted({n for n in names if names.count(n) > 1})}")
    points = math.prod(len(a) for a in axes)
    if points > MAX_POINTS:
        raise ConfigError(f"{source}: the grid has {points} points, more than {MAX_POINTS} "
                          f"(split it into several sweeps)")


def _check_value(value: Any, source: str, key: str) -> None:
    """An axis value is plain data (text, numbers, booleans, null, lists, mappings with text
    keys) that the result's coordinates can hold."""
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_value(item, source, key)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            if not isinstance(name, str):
                raise ConfigError(f"{source}: axis '{key}': mapping keys must be text, found "
                                  f"{describe(name)}")
            _check_value(item, source, key)
    elif isinstance(value, bool) or value is None or isinstance(value, str):
        return
    elif isinstance(value, int):
        if not -2**63 <= value < 2**63:
            raise ConfigError(f"{source}: axis '{key}': integer {describe(value)} does not fit "
                              f"64 bits")
    elif not isinstance(value, float):
        raise ConfigError(f"{source}: axis '{key}': expected text, numbers, lists or mappings, "
                          f"found {describe(value)}")


def load_spec(spec: str | os.PathLike | Mapping[str, Any]) -> SweepSpec:
    """Read and validate a sweep spec (see the module docstring)."""
    if isinstance(spec, Mapping):
        data, source, folder = dict(spec), "<spec>", Path.cwd()
        check_structure(data, source)  # bounded depth and size, no self-nesting
        text = yaml.safe_dump(data, sort_keys=False)
    elif isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        data = read_mapping(path, what="sweep spec")
        source, folder, text = str(path), path.resolve().parent, read_text(path, "sweep spec")
    else:
        raise ConfigTypeError(f"argument 'spec': expected a path or a mapping, found "
                              f"{describe(spec)}")
    unknown = set(data) - {"base", "axes", "zip"}
    if unknown:
        raise ConfigError(f"{source}: unknown key '{sorted(unknown)[0]}' (expected base, axes, "
                          f"zip)")
    raw_base = data.get("base")
    if not isinstance(raw_base, Mapping):
        raise ConfigError(f"{source}: key 'base': expected a mapping with network, collective, "
                          f"size, ..., found {raw_base!r}")
    base = _base(raw_base, folder, source)
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
    _check_axes(axes, source)
    configs = {config_key(key, value): _axis_config(value, key, folder, source)
               for axis in axes for row in axis.values for key, value in zip(axis.keys, row)
               if key in ("network", "system")}
    result = SweepSpec(base=base, axes=tuple(axes), source=source, text=text, configs=configs)
    # check every override once (cheap: one point per axis value, not the whole grid)
    from ..units import parse_size
    if result.kind == "workload":
        _check_workload(base, source)
    else:
        parse_size(base["size"], source=source, key="base.size")
    # each key is tried on every whole config the axes give (as a point applies them: whole
    # configs first), so a key that fits no config fails here, not in a worker
    for start in whole_config_bases(result.base, result.axes, configs):
        for axis in result.axes:
            for row in axis.values:
                probe = copy.deepcopy(start)
                apply_settings(probe, zip(axis.keys, row), source, configs)
                for key, value in zip(axis.keys, row):
                    if key == "size":  # sizes become coordinates: they must parse up front
                        parse_size(value, source=source, key=f"axes.{key}")
                if result.kind == "workload" and any(k.startswith("workload")
                                                     for k in axis.keys):
                    _check_workload(probe, source)
    return result
