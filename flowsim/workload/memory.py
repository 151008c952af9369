"""Memory ops against local memory and a disaggregated remote-memory config.

ASTRA-sim 2.x's remote-memory json (``memory-type`` and friends) is read into
:class:`MemoryConfig`:

==============================  ============================================================
``memory-type``                 ``NO_MEMORY_EXPANSION`` (remote ops use local memory),
                                ``PER_NPU_MEMORY_EXPANSION`` (each NPU its own remote memory;
                                requests overlap), ``PER_NODE_MEMORY_EXPANSION`` (one remote
                                memory per node of ``num-npus-per-node`` NPUs, serving one
                                request at a time) or ``MEMORY_POOL`` (one for all NPUs, one
                                request at a time)
``remote-mem-latency``          ns per request
``remote-mem-bw``               GB/s (GB = 1e9 B)
``num-npus-per-node``           NPUs per node (per-node expansion)
==============================  ============================================================

A request of ``m`` bytes takes ``latency + m / bandwidth``; a memory that serves one request
at a time is busy for that whole time. Local memory uses the system's ``local-mem-bw`` and no
latency.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._io import read_mapping
from ..errors import config_error, unknown_key_error

MEMORY_TYPES = {
    "NO_MEMORY_EXPANSION": "none",
    "PER_NPU_MEMORY_EXPANSION": "per_npu",
    "PER_NODE_MEMORY_EXPANSION": "per_node",
    "MEMORY_POOL": "pool",
}
_KEYS = {"memory-type", "remote-mem-latency", "remote-mem-bw", "num-npus-per-node",
         "num-nodes"}


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Remote memory: ``kind`` in ``none``/``per_npu``/``per_node``/``pool``, latency (ns),
    bandwidth (B/ns) and NPUs per node."""

    kind: str = "none"
    latency_ns: float = 0.0
    bytes_per_ns: float = np.inf
    npus_per_node: int = 1


def parse_memory_config(data: Mapping[str, Any], source: str = "<dict>") -> MemoryConfig:
    """Validate an ASTRA-sim remote-memory mapping (see the module docstring)."""
    for key in data:
        if key not in _KEYS:
            raise unknown_key_error(source, str(key), _KEYS)
    kind = MEMORY_TYPES.get(data.get("memory-type", "NO_MEMORY_EXPANSION"))
    if kind is None:
        raise config_error(source, "memory-type", "one of " + ", ".join(MEMORY_TYPES),
                           data.get("memory-type"))
    if kind == "none":
        return MemoryConfig()
    values = {}
    for key, minimum in (("remote-mem-latency", 0.0), ("remote-mem-bw", 0.0)):
        value = data.get(key, ...)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            np.isfinite(value) and (value > minimum if key == "remote-mem-bw" else
                                    value >= minimum)
        if not ok:
            raise config_error(source, key, "a number, ns" if key == "remote-mem-latency"
                               else "a positive number, GB/s", value)
        values[key] = float(value)
    per_node = data.get("num-npus-per-node", 1)
    if kind == "per_node" and (not isinstance(per_node, int) or isinstance(per_node, bool)
                               or per_node < 1):
        raise config_error(source, "num-npus-per-node", "an integer >= 1", per_node)
    return MemoryConfig(kind=kind, latency_ns=values["remote-mem-latency"],
                        bytes_per_ns=values["remote-mem-bw"], npus_per_node=int(per_node))


def load_memory(source: str | os.PathLike | Mapping[str, Any] | MemoryConfig | None
                ) -> MemoryConfig:
    """A remote-memory config from a path, a mapping, a config or ``None`` (no expansion)."""
    if source is None:
        return MemoryConfig()
    if isinstance(source, MemoryConfig):
        return source
    if isinstance(source, Mapping):
        return parse_memory_config(source)
    return parse_memory_config(read_mapping(source, what="remote-memory config"), str(source))
