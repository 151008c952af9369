"""ASTRA-sim 1.0 analytical network JSON (``"topology-name": "Hierarchical"``) as a
:class:`~flowsim.topology.network_config.NetworkConfig`.

ASTRA-sim 1.0's congestion-unaware backend charges every message independently, in the highest
dimension where sender and receiver differ::

    latency = hops * link-latency + bytes / (link-bandwidth * scalar)
              + 2 * nic-latency (+ router-latency on a Switch)
    latency = max(latency, (hbm-latency + bytes / hbm-bandwidth) * hbm-scale)

with ``hops`` the shorter ring distance on a Ring, 1 on a FullyConnected and 2 on a Switch, and
``scalar`` the number of links a message may use. flowsim charges a message ``sum of its links'
latencies + bytes / bottleneck bandwidth`` on the 2.x blocks of the same names (a Ring link per
hop, one FullyConnected link, a Switch's uplink and downlink), so each dimension of ``p`` NPUs
converts to a 2.x ``bandwidth`` (GB/s) and per-link ``latency`` (ns) of:

``Ring``
    ``link-bandwidth * even(links-count)``; ``link-latency`` per hop. ``2 * nic-latency`` is
    added once per message, so it can be folded into the link latency only when every pair is
    one hop apart (``p <= 3``); otherwise a non-zero ``nic-latency`` is an error.
``FullyConnected``
    ``link-bandwidth * (links-count // (p - 1))``; ``link-latency + 2 * nic-latency``.
``Switch``
    ``link-bandwidth * links-count``; ``link-latency + router-latency / 2 + nic-latency`` on each
    of the two links, i.e. ``2 * link-latency + router-latency + 2 * nic-latency`` per message.

``even(n)`` is ``n`` rounded down to an even number: ASTRA-sim's ``HierarchicalTopology``
counts a Ring's links in pairs and drops an odd one (with a warning). A scalar of 0 (one Ring
link, or fewer FullyConnected links than peers) makes ASTRA-sim exit; here it is a
:class:`~flowsim.errors.ConfigError`. Bandwidths keep ASTRA-sim's "GB/s" = 2**30 B/s.

A collective phase sends only within one dimension, where both simulators charge the same.
Messages that cross dimensions (flat ``one*`` algorithms on several dimensions) differ: 1.0
charges only the highest dimension crossed, flowsim's analytical model the lowest.

ASTRA-sim accumulates the network term in an ``int``, so it truncates each message to whole ns;
flowsim does not (a difference below 1 ns per message).

The HBM term is not modelled. It is dropped silently when ``hbm-scale`` is 0 or when it can
never exceed the network term (neither its constant nor its per-byte part is larger), and with
a :class:`~flowsim.errors.FlowsimWarning` otherwise. Unlike ``link-bandwidth``, ASTRA-sim 1.0's
analytical ``main.cc`` passes ``hbm-bandwidth`` on unconverted, as bytes/ns (GB/s with
GB = 1e9); that reading is also the conservative one for the check (it gives the larger HBM
term of the two possible units).

``nic-latency``, ``router-latency``, ``hbm-latency``, ``hbm-bandwidth`` and ``hbm-scale`` may be
left out (ASTRA-sim's defaults: 0, 0, 0, 1, 0), and so may ``dimensions-count`` (1). Every
other key is required, every list must hold one entry per dimension, and a key ASTRA-sim 1.0
does not read is an error. ``dimension-type`` only feeds ASTRA-sim's dollar-cost model: it is
checked and otherwise ignored, as is ``router-latency`` outside Switch dimensions.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    Quantity,
    as_choice,
    as_config,
    as_int,
    as_number,
    check_unknown_keys,
    read_int,
)
from ..errors import ConfigError, FlowsimWarning, config_error
from ..units import network_bandwidth_to_bytes_per_ns
from .network_config import MAX_DIMS, MAX_NPUS, NetworkConfig

#: The only ``topology-name`` ASTRA-sim 1.0's analytical backend builds.
TOPOLOGY_NAME = "Hierarchical"
#: ``topologies-per-dim`` values and the flowsim blocks they become (same names).
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
#: ``dimension-type`` values (used by ASTRA-sim's cost model only).
DIMENSION_TYPES = ("T", "N", "P", "PP")

_REQUIRED = ("topology-name", "topologies-per-dim", "dimension-type", "units-count",
             "links-count", "link-latency", "link-bandwidth")
#: Keys ASTRA-sim 1.0 reads with a default when absent, and that default.
_DEFAULTS: dict[str, Any] = {"dimensions-count": 1, "nic-latency": 0.0, "router-latency": 0.0,
                             "hbm-latency": 0.0, "hbm-bandwidth": 1.0, "hbm-scale": 0.0}
_KNOWN = (*_REQUIRED, *_DEFAULTS)
_EXPECTED = {"topology-name": f"'{TOPOLOGY_NAME}'",
             "topologies-per-dim": "one of " + ", ".join(TOPOLOGIES) + " per dimension",
             "dimension-type": "one of " + ", ".join(DIMENSION_TYPES) + " per dimension",
             "units-count": "a list of NPU counts, one per dimension",
             "links-count": "a list of links per NPU, one per dimension",
             "link-latency": "a list of link latencies in ns, one per dimension",
             "link-bandwidth": "a list of link bandwidths in GB/s (2**30 B/s), one per "
                               "dimension"}
#: The sane range of every per-dimension number (the HBM bandwidth is bytes/ns, the scale a
#: factor >= 0).
_QUANTITIES = {"link-latency": LATENCY_NS, "link-bandwidth": BANDWIDTH_GBPS,
               "nic-latency": LATENCY_NS, "router-latency": LATENCY_NS,
               "hbm-latency": LATENCY_NS, "hbm-bandwidth": BANDWIDTH_GBPS,
               "hbm-scale": Quantity("", 0.0, 1e9)}
#: Fewest hops a message takes in a dimension of each topology.
_MIN_HOPS = {"Ring": 1, "FullyConnected": 1, "Switch": 2}


def is_astra1_network(data: Any) -> bool:
    """Whether a mapping is an ASTRA-sim 1.0 analytical network config (it has one of the
    1.0-only keys ``topology-name``, ``units-count``, ``topologies-per-dim``).

    Examples
    --------
    >>> is_astra1_network({"topology-name": "Hierarchical"}), is_astra1_network({"topology": []})
    (True, False)
    """
    return isinstance(data, Mapping) and any(
        key in data for key in ("topology-name", "units-count", "topologies-per-dim"))


def parse_astra1_network(data: Mapping[str, Any], source: str = "<dict>") -> NetworkConfig:
    """Validate an ASTRA-sim 1.0 analytical network mapping and convert it to a 2.x config.

    Parameters
    ----------
    data : Mapping
        The JSON object (keys as in the module docstring).
    source : str
        The file it came from, for messages.

    Returns
    -------
    NetworkConfig
        One dimension per 1.0 dimension, with the bandwidth and link latency that give each
        message ASTRA-sim 1.0's cost (see the module docstring).

    Raises
    ------
    ConfigError
        Naming ``source`` and the key for a missing, unknown or unusable value, and for a
        ``nic-latency`` that flowsim cannot charge exactly.

    Warns
    -----
    FlowsimWarning
        When a dimension's HBM term can exceed its network term (it is not modelled).
    """
    as_config(data, source=source, what="ASTRA-sim 1.0 network")
    check_unknown_keys(data, _KNOWN, source=source)
    for key in _REQUIRED:
        if key not in data:
            raise config_error(source, key, _EXPECTED.get(key, "one value per dimension"), ...)
    if data["topology-name"] != TOPOLOGY_NAME:
        raise config_error(source, "topology-name", f"'{TOPOLOGY_NAME}' (the only topology "
                           f"ASTRA-sim 1.0's analytical backend builds)", data["topology-name"])
    ndims = read_int(data, "dimensions-count", source=source, default=1, minimum=1,
                     maximum=MAX_DIMS)
    columns = {key: _per_dimension(data, key, ndims, source) for key in _KNOWN
               if key not in ("topology-name", "dimensions-count")}
    topology, counts, bandwidth, latency = [], [], [], []
    for d in range(ndims):
        dim = _dimension({key: values[d] for key, values in columns.items()}, d, source)
        topology.append(dim.block)
        counts.append(dim.npus)
        bandwidth.append(dim.link_bandwidth * _bandwidth_scalar(dim, d, source))
        latency.append(_link_latency(dim, d, source))
        _check_hbm(dim, d, bandwidth[-1], source)
    if math.prod(counts) > MAX_NPUS:
        raise config_error(source, "units-count", f"at most {MAX_NPUS} NPUs in total", counts)
    return NetworkConfig(topology=tuple(topology), npus_count=tuple(counts),
                         bandwidth_gbps=tuple(bandwidth), latency_ns=tuple(latency),
                         in_network_reduction=(False,) * ndims, source=source)


@dataclass(frozen=True, kw_only=True)
class _Dimension:
    """The validated 1.0 values of one dimension (ns, GB/s with GB = 2**30 for links, B/ns
    for HBM)."""

    block: str
    npus: int
    links: int
    link_latency: float
    link_bandwidth: float
    nic_latency: float
    router_latency: float
    hbm_latency: float
    hbm_bandwidth: float
    hbm_scale: float


def _per_dimension(data: Mapping[str, Any], key: str, ndims: int, source: str) -> list[Any]:
    """The list under ``key`` (ASTRA-sim's default when absent), one entry per dimension."""
    value = data.get(key, [_DEFAULTS.get(key)] * ndims)
    if not isinstance(value, (list, tuple)) or len(value) != ndims:
        raise config_error(source, key, f"a list of {ndims} values (one per dimension, "
                           f"'dimensions-count' is {ndims})", value)
    return list(value)


def _dimension(row: Mapping[str, Any], d: int, source: str) -> _Dimension:
    """Validate dimension ``d``'s entry of every per-dimension key."""
    def key(name: str) -> str:
        return f"{name}[{d}]"

    block = as_choice(row["topologies-per-dim"], TOPOLOGIES, source=source,
                      key=key("topologies-per-dim"))
    as_choice(row["dimension-type"], DIMENSION_TYPES, source=source, key=key("dimension-type"))
    try:
        npus = as_int(row["units-count"], source=source, key=key("units-count"), minimum=2,
                      maximum=MAX_NPUS)
    except ConfigError as exc:
        raise type(exc)(f"{exc} (flowsim needs 2 or more NPUs per dimension; leave out "
                        f"dimensions of 1)") from None
    links = as_int(row["links-count"], source=source, key=key("links-count"), minimum=1)
    numbers = {name.replace("-", "_"): as_number(row[name], source=source, key=key(name),
                                                 quantity=_QUANTITIES[name])
               for name in _QUANTITIES}
    return _Dimension(block=block, npus=npus, links=links, **numbers)


def _bandwidth_scalar(dim: _Dimension, d: int, source: str) -> int:
    """How many of its ``links-count`` links a message uses, as ASTRA-sim 1.0 counts them."""
    key = f"links-count[{d}]"
    if dim.block == "Ring":
        scalar = dim.links - dim.links % 2
        if scalar == 0:
            raise config_error(source, key, "an integer >= 2 (ASTRA-sim counts a Ring's links in "
                               "pairs and rounds an odd count down)",
                               dim.links)
    elif dim.block == "FullyConnected":
        scalar = dim.links // (dim.npus - 1)
        if scalar == 0:
            raise config_error(source, key, f"an integer >= {dim.npus - 1} (a FullyConnected "
                               f"dimension of {dim.npus} splits its links over "
                               f"{dim.npus - 1} peers)", dim.links)
    else:
        scalar = dim.links
    return scalar


def _link_latency(dim: _Dimension, d: int, source: str) -> float:
    """2.x per-link latency whose sum over a message's path equals 1.0's fixed latency."""
    if dim.block == "Switch":
        # two links (up, down) carry: 2 link latencies + router latency + 2 nic latencies
        return dim.link_latency + dim.router_latency / 2 + dim.nic_latency
    if dim.block == "Ring" and dim.npus > 3 and dim.nic_latency > 0:
        # 2 * nic-latency is per message, not per hop: exact only when every path is 1 hop
        raise config_error(source, f"nic-latency[{d}]", "0 on a Ring of more than 3 NPUs "
                           "(ASTRA-sim adds 2 * nic-latency once per message, whatever its "
                           "hop count; flowsim charges latency per link, so it can fold the "
                           "NIC latency in only where every message takes one hop)",
                           dim.nic_latency)
    return dim.link_latency + 2 * dim.nic_latency


def _check_hbm(dim: _Dimension, d: int, bandwidth_gbps: float, source: str) -> None:
    """Warn when the (unmodelled) HBM term can be the larger of ASTRA-sim's two terms."""
    if dim.hbm_scale == 0:
        return
    net_fixed = (_MIN_HOPS[dim.block] * dim.link_latency + 2 * dim.nic_latency
                 + (dim.router_latency if dim.block == "Switch" else 0.0))
    net_per_byte = 1.0 / network_bandwidth_to_bytes_per_ns(bandwidth_gbps)
    hbm_fixed = dim.hbm_latency * dim.hbm_scale
    hbm_per_byte = dim.hbm_scale / dim.hbm_bandwidth  # hbm-bandwidth is bytes/ns
    # both terms are linear in the message size, so the HBM one never wins iff neither its
    # constant nor its slope is larger
    if hbm_fixed <= net_fixed and hbm_per_byte <= net_per_byte:
        return
    if hbm_per_byte > net_per_byte:
        cross = max(0.0, (net_fixed - hbm_fixed) / (hbm_per_byte - net_per_byte))
        when = f"messages larger than {cross:.0f} bytes"
    elif hbm_per_byte < net_per_byte:
        cross = (hbm_fixed - net_fixed) / (net_per_byte - hbm_per_byte)
        when = f"messages smaller than {cross:.0f} bytes"
    else:  # the same per-byte cost and a larger constant: always
        when = "messages of every size"
    warnings.warn(f"{source}: key 'hbm-scale[{d}]' = {dim.hbm_scale!r}: ASTRA-sim charges "
                  f"(hbm-latency + bytes / hbm-bandwidth) * hbm-scale when that exceeds the "
                  f"network latency, which it does for {when} in dimension {d}; flowsim does "
                  f"not model the HBM term", FlowsimWarning, stacklevel=4)
