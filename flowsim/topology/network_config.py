"""Network configs: ASTRA-sim 2.x multi-dimensional network YAML into a frozen dataclass.

Accepted keys (one list entry per dimension, scalars are broadcast to every dimension):

``topology``
    ``Ring``, ``FullyConnected`` or ``Switch`` per dimension.
``npus_count``
    Integer >= 2 per dimension; NPU ids are mixed-radix coordinates with dimension 0 fastest.
``bandwidth``
    Per-link bandwidth in ASTRA-sim "GB/s" (GB = 2**30 bytes), > 0 (from 1e-6 to 1e12:
    :data:`flowsim._validate.BANDWIDTH_GBPS`).
``latency``
    Per-link latency in ns, >= 0 (at most 1e12: :data:`flowsim._validate.LATENCY_NS`).
``in_network_reduction`` (flowsim extension)
    Booleans; ``true`` marks a Switch dimension whose switch reduces (SHARP-like).
``name``
    Free text, ignored.

A file with a ``fabric`` or ``infragraph`` key describes a graph instead (see
:mod:`.fabric_config` and :mod:`.infragraph`); :func:`flowsim.load_network` reads every
kind.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .._io import read_mapping
from .._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    as_bool,
    as_config,
    as_int,
    as_number,
    read_list,
    unknown_keys,
)
from ..errors import ConfigError, ConfigTypeError, FlowsimWarning, config_error
from ..units import network_bandwidth_to_bytes_per_ns
from .blocks import BLOCKS, canonical_block_name

#: The keys of an ASTRA-sim 2.x network config (``name`` is free text).
NETWORK_KEYS = frozenset({"topology", "npus_count", "bandwidth", "latency", "device",
                          "in_network_reduction", "name"})
#: Largest network flowsim builds (guards array allocation against absurd configs).
MAX_NPUS = 1 << 22
#: Most dimensions a network can have: each holds at least 2 NPUs.
MAX_DIMS = MAX_NPUS.bit_length() - 1


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
    device : str or None
        The NPUs' accelerator preset (``device`` key, or a ``cluster:`` block's).
    system : str or None
        The bundled system a run on this network takes when it is given none (a ``cluster:``
        block's: :data:`~flowsim.topology.clusters.CLUSTER_SYSTEM`); ``None``: flowsim's
        default, ASTRA-sim's ``Ring_4chunks`` settings.
    source : str
        Where the config came from (a path or ``"<dict>"``), for error messages.
    """

    topology: tuple[str, ...]
    npus_count: tuple[int, ...]
    bandwidth_gbps: tuple[float, ...]
    latency_ns: tuple[float, ...]
    in_network_reduction: tuple[bool, ...]
    #: the accelerator of every NPU (a preset name of :mod:`flowsim.compute`), if known
    device: str | None = None
    #: the bundled system a run takes when it is given none (a cluster preset's)
    system: str | None = None
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


def _per_dimension(data: Mapping[str, Any], key: str, item: Callable[..., Any],
                   source: str, ndims: int | None) -> list[Any]:
    """The values under ``key``, one per dimension (a single value is broadcast), each read by
    ``item``; ``ndims`` is None for ``topology``, which sets the dimension count."""
    values: list[Any] = read_list(data, key, source=source, scalar=True, min_length=1,
                                  max_length=MAX_DIMS, what="one value per dimension")
    if ndims is not None and len(values) != ndims:
        if isinstance(data[key], (list, tuple)):
            raise config_error(source, key, f"{ndims} values (one per dimension, as in "
                               f"'topology')", data[key])
        values = values * ndims
    return [item(v, source=source, key=f"{key}[{i}]") for i, v in enumerate(values)]


def _block(value: Any, *, source: str, key: str) -> str:
    """A building-block name (case-insensitive, with aliases such as ``fc``)."""
    block = canonical_block_name(value)
    if block is None:
        raise config_error(source, key, "one of " + ", ".join(BLOCKS), value,
                           cls=ConfigError if isinstance(value, str) else ConfigTypeError)
    return block


def parse_network_config(data: Mapping[str, Any], source: str = "<dict>") -> NetworkConfig:
    """Validate an ASTRA-sim 2.x network mapping and return a :class:`NetworkConfig`.

    Raises
    ------
    ConfigError
        Naming ``source`` and the offending key for every unusable value.

    Warns
    -----
    FlowsimWarning
        For every key that is not part of the format (it is ignored).
    """
    as_config(data, source=source, what="network")
    stray = [key for key in ("nodes", "gpus_per_node", "nic_gbps") if key in data]
    if "topology" not in data and stray:   # a cluster's keys without their block
        raise config_error(source, stray[0], "inside a 'cluster:' block (cluster: {device: "
                           "h100, nodes: ...}) or an ASTRA-sim network's 'topology'",
                           data[stray[0]])
    topology = _per_dimension(data, "topology", _block, source, None)
    ndims = len(topology)
    counts = _per_dimension(data, "npus_count", partial(as_int, minimum=2, maximum=MAX_NPUS),
                            source, ndims)
    if math.prod(counts) > MAX_NPUS:
        raise config_error(source, "npus_count", f"at most {MAX_NPUS} NPUs in total", counts)
    bandwidth = _per_dimension(data, "bandwidth", partial(as_number, quantity=BANDWIDTH_GBPS),
                               source, ndims)
    latency = _per_dimension(data, "latency", partial(as_number, quantity=LATENCY_NS),
                             source, ndims)
    inr = [False] * ndims
    if "in_network_reduction" in data:
        inr = _per_dimension(data, "in_network_reduction", as_bool, source, ndims)
    for i, reduces in enumerate(inr):
        if reduces and topology[i] != "Switch":
            raise config_error(source, f"in_network_reduction[{i}]",
                               f"false (only a Switch dimension can reduce in the network; "
                               f"dimension {i} is a {topology[i]})", reduces)
    for key in unknown_keys(data, NETWORK_KEYS):
        warnings.warn(f"{source}: unknown network key '{key}' ignored", FlowsimWarning,
                      stacklevel=3)
    return NetworkConfig(topology=tuple(topology), npus_count=tuple(counts),
                         bandwidth_gbps=tuple(bandwidth), latency_ns=tuple(latency),
                         in_network_reduction=tuple(inr), device=read_device(data, source),
                         source=source)


def read_device(data: Mapping[str, Any], source: str) -> str | None:
    """The optional ``device`` key of a network: an accelerator preset's name."""
    if data.get("device") is None:
        return None
    from .clusters import device_name

    return device_name(data["device"], source=source, key="device")


def read_network_config(path: str | os.PathLike) -> NetworkConfig:
    """Read and validate a network YAML file."""
    return parse_network_config(read_mapping(path, what="network config"), source=str(Path(path)))
