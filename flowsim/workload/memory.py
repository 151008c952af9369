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
``remote-mem-latency``          ns per request (at most 1e12)
``remote-mem-bw``               GB/s (GB = 1e9 B), from 1e-6 to 1e12
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
from .._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    as_config,
    check_unknown_keys,
    read_choice,
    read_int,
    read_number,
)
from ..topology.network_config import MAX_NPUS

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
    """Validate an ASTRA-sim remote-memory mapping (see the module docstring).

    ``num-nodes`` is checked (an integer >= 1) but not used: the nodes follow from the NPUs
    and ``num-npus-per-node``.
    """
    as_config(data, source=source, what="remote-memory")
    check_unknown_keys(data, _KEYS, source=source)
    kind = read_choice(data, "memory-type", MEMORY_TYPES, source=source,
                       default="none")
    per_node = read_int(data, "num-npus-per-node", source=source, default=1, minimum=1,
                        maximum=MAX_NPUS)
    read_int(data, "num-nodes", source=source, default=1, minimum=1, maximum=MAX_NPUS)
    if kind == "none":
        return MemoryConfig()
    return MemoryConfig(kind=kind,
                        latency_ns=read_number(data, "remote-mem-latency", source=source,
                                               quantity=LATENCY_NS),
                        bytes_per_ns=read_number(data, "remote-mem-bw", source=source,
                                                 quantity=BANDWIDTH_GBPS),
                        npus_per_node=per_node)


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
