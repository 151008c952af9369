"""Network configs: ASTRA-sim 2.x multi-dimensional network YAML into a frozen dataclass.

Accepted keys (one list entry per dimension, scalars are broadcast to every dimension):

``topology``
    ``Ring``, ``FullyConnected`` or ``Switch`` per dimension.
``npus_count``
    Integer >= 2 per dimension; NPU ids are mixed-radix coordinates with dimension 0 fastest.
``bandwidth``
    Per-link bandwidth in ASTRA-sim "GB/s" (GB = 2**30 bytes), > 0.
``latency``
    Per-link latency in ns, >= 0.
``in_network_reduction`` (flowsim extension)
    Booleans; ``true`` marks a Switch dimension whose switch reduces (SHARP-like).
``name``
    Free text, ignored.

A file with a ``fabric`` or ``infragraph`` key describes a graph instead (see
:mod:`.fabric` and :mod:`.infragraph`); :func:`flowsim.load_network` reads every kind.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._io import read_mapping
from ..errors import config_error
from ..units import network_bandwidth_to_bytes_per_ns
from .blocks import BLOCKS, canonical_block_name

_KNOWN_KEYS = {"topology", "npus_count", "bandwidth", "latency", "in_network_reduction", "name"}
#: Largest network flowsim builds (guards array allocation against absurd configs).
MAX_NPUS = 1 << 22


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    """A validated multi-dimensional network description (hashable, so networks can be cached).

    Attributes
    ----------
    topology : tuple of str
        Building block per dimension (``"Ring"``, ``"FullyConnected"``, ``"Switch"``).
    npus_count : tuple of int
        NPUs per dimension.
    bandwidth_gbps : tuple of float
        Link bandwidth per dimension as written in the config (ASTRA-sim GB/s, 2**30 B/s).
    latency_ns : tuple of float
        Link latency per dimension in ns.
    in_network_reduction : tuple of bool
        Whether each dimension's switch reduces in the network.
    source : str
        Where the config came from (a path or ``"<dict>"``), for error messages.
    """

    topology: tuple[str, ...]
    npus_count: tuple[int, ...]
    bandwidth_gbps: tuple[float, ...]
    latency_ns: tuple[float, ...]
    in_network_reduction: tuple[bool, ...]
    source: str = field(default="<dict>", compare=False)

    @property
    def ndims(self) -> int:
        return len(self.topology)

    @property
    def npus(self) -> int:
        return math.prod(self.npus_count)

    @property
    def bandwidth_bytes_per_ns(self) -> tuple[float, ...]:
        return tuple(network_bandwidth_to_bytes_per_ns(b) for b in self.bandwidth_gbps)

    def to_dict(self) -> dict[str, Any]:
        """The config as ASTRA-sim-style keys (round-trips through :func:`parse_network_config`)."""
        out: dict[str, Any] = {
            "topology": list(self.topology),
            "npus_count": list(self.npus_count),
            "bandwidth": list(self.bandwidth_gbps),
            "latency": list(self.latency_ns),
        }
        if any(self.in_network_reduction):
            out["in_network_reduction"] = list(self.in_network_reduction)
        return out


def _as_list(data: Mapping[str, Any], key: str, source: str, ndims: int | None) -> list[Any]:
    if key not in data:
        raise config_error(source, key, "one value per dimension", ...)
    value = data[key]
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise config_error(source, key, "a non-empty list (one value per dimension)", value)
        if ndims is not None and len(value) != ndims:
            raise config_error(source, key,
                               f"{ndims} values (one per dimension, as in 'topology')", value)
        return list(value)
    if ndims is None:
        return [value]
    return [value] * ndims


def _positive_int(value: Any, source: str, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and (not math.isfinite(value) or value != int(value))) \
            or int(value) < minimum:
        raise config_error(source, key, f"an integer >= {minimum}", value)
    return int(value)


def _number(value: Any, source: str, key: str, *, strictly_positive: bool) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = value > 0 if strictly_positive else value >= 0
    if not ok:
        raise config_error(source, key, "a number > 0" if strictly_positive else "a number >= 0",
                           value)
    return float(value)


def parse_network_config(data: Mapping[str, Any], source: str = "<dict>") -> NetworkConfig:
    """Validate an ASTRA-sim 2.x network mapping and return a :class:`NetworkConfig`.

    Raises
    ------
    ConfigError
        Naming ``source`` and the offending key for every unusable value.
    """
    import warnings

    from ..errors import FlowsimWarning

    topo_raw = _as_list(data, "topology", source, None)
    ndims = len(topo_raw)
    topology = []
    for i, name in enumerate(topo_raw):
        block = canonical_block_name(name)
        if block is None:
            raise config_error(source, f"topology[{i}]", "one of " + ", ".join(BLOCKS), name)
        topology.append(block)
    counts = tuple(_positive_int(v, source, f"npus_count[{i}]", 2)
                   for i, v in enumerate(_as_list(data, "npus_count", source, ndims)))
    bandwidth = tuple(_number(v, source, f"bandwidth[{i}]", strictly_positive=True)
                      for i, v in enumerate(_as_list(data, "bandwidth", source, ndims)))
    latency = tuple(_number(v, source, f"latency[{i}]", strictly_positive=False)
                    for i, v in enumerate(_as_list(data, "latency", source, ndims)))
    if "in_network_reduction" in data:
        inr_raw = _as_list(data, "in_network_reduction", source, ndims)
    else:
        inr_raw = [False] * ndims
    inr = []
    for i, v in enumerate(inr_raw):
        if not isinstance(v, bool):
            raise config_error(source, f"in_network_reduction[{i}]", "true or false", v)
        if v and topology[i] != "Switch":
            raise config_error(source, f"in_network_reduction[{i}]",
                               f"false (only a Switch dimension can reduce in the network; "
                               f"dimension {i} is a {topology[i]})", v)
        inr.append(v)
    if math.prod(counts) > MAX_NPUS:
        raise config_error(source, "npus_count", f"at most {MAX_NPUS} NPUs in total",
                           list(counts))
    for key in data:
        if key not in _KNOWN_KEYS:
            warnings.warn(f"{source}: unknown network key '{key}' ignored", FlowsimWarning,
                          stacklevel=3)
    return NetworkConfig(topology=tuple(topology), npus_count=counts, bandwidth_gbps=bandwidth,
                         latency_ns=latency, in_network_reduction=tuple(inr), source=source)


def read_network_config(path: str | os.PathLike) -> NetworkConfig:
    """Read and validate a network YAML file."""
    return parse_network_config(read_mapping(path, what="network config"), source=str(Path(path)))
