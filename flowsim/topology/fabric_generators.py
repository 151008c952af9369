"""Fabric generators: leaf-spine (Clos, rail-optimized, three tiers), k-ary fat-tree,
dragonfly, torus and mesh, each from a handful of keys into a :class:`~.fabric_builder.
FabricBuilder` and the logical dims the generator suggests.

Every generator takes the ``fabric:`` mapping and the source (for messages); bandwidths are
GB/s (2**30 B/s) and latencies ns, within the ranges of :mod:`flowsim._validate`. Sizes are
checked against the fabric caps of :mod:`.fabric_builder` before (or while) anything is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from .._validate import (
    BANDWIDTH_GBPS,
    FACTOR,
    LATENCY_NS,
    REQUIRED,
    as_int,
    as_number,
    read_bool,
    read_int,
    read_list,
    read_mapping,
    read_number,
)
from ..errors import config_error
from .fabric_builder import MAX_FABRIC_NPUS, FabricBuilder
from .network_config import MAX_DIMS

#: What a generator returns: the fabric so far and the logical dims it suggests.
Generated = tuple[FabricBuilder, tuple[int, ...]]


def _int(spec: Mapping[str, Any], key: str, source: str, default: Any = REQUIRED,
         minimum: int = 1) -> int:
    return read_int(spec, key, source=source, prefix="fabric.", default=default,
                    minimum=minimum)


def _bandwidth(spec: Mapping[str, Any], key: str, source: str, default: Any = REQUIRED,
               prefix: str = "fabric.") -> float:
    return read_number(spec, key, source=source, prefix=prefix, default=default,
                       quantity=BANDWIDTH_GBPS)


def _latency(spec: Mapping[str, Any], key: str, source: str, default: Any = REQUIRED,
             prefix: str = "fabric.") -> float:
    return read_number(spec, key, source=source, prefix=prefix, default=default,
                       quantity=LATENCY_NS)


def _section(spec: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    """A nested ``{bandwidth, latency}`` mapping (absent or null: empty)."""
    return read_mapping(spec, key, source=source, prefix="fabric.", default={},
                        what="a mapping such as {bandwidth: 50, latency: 500}")


LEAF_SPINE_KEYS = frozenset({"hosts", "npus_per_host", "scale_up", "nic", "hosts_per_leaf",
                             "oversubscription", "uplink_bandwidth", "spine_latency",
                             "rail_optimized", "nics_per_host", "spines", "pods",
                             "super_spines"})
TORUS_KEYS = frozenset({"dims", "bandwidth", "latency"})


def leaf_spine(spec: Mapping[str, Any], source: str) -> Generated:
    """Hosts of ``npus_per_host`` NPUs (optionally on a ``scale_up`` switch each), one NIC per
    NPU to a leaf, every leaf to every spine.

    Keys: ``hosts``, ``npus_per_host``, ``scale_up: {bandwidth, latency}`` (optional),
    ``nic: {bandwidth, latency}``, ``hosts_per_leaf``, ``rail_optimized`` (NIC ``r`` of a group
    of hosts on leaf ``r`` of that group, instead of all NICs of a host on one leaf),
    ``oversubscription`` (a leaf's downlink bandwidth over its uplink bandwidth, default 1:
    a leaf gets ``NICs x nic bandwidth / (oversubscription x uplink_bandwidth)`` uplinks),
    ``uplink_bandwidth`` (per port, default the NIC's), ``spines`` (default one per uplink;
    a leaf's uplinks are spread evenly over them), ``spine_latency``, ``nics_per_host``
    (default one per NPU, each NPU's own port; fewer NICs hang off the host's scale-up
    switch), and for three tiers ``pods`` (leaves split evenly; ``spines`` per pod),
    ``oversubscription: [leaf, spine]`` and ``super_spines``. NPU
    ``h * npus_per_host + g`` is NPU ``g`` of host ``h``; the logical dims are
    ``[npus_per_host, hosts]``.
    """
    hosts = _int(spec, "hosts", source, minimum=1)
    per_host = _int(spec, "npus_per_host", source, default=1, minimum=1)
    if hosts * per_host < 2:
        raise config_error(source, "fabric.hosts", "at least 2 NPUs in total", hosts)
    nic = _section(spec, "nic", source)
    nic_bw = _bandwidth(nic, "bandwidth", source, prefix="fabric.nic.")
    nic_lat = _latency(nic, "latency", source, 500.0, prefix="fabric.nic.")
    per_leaf = _int(spec, "hosts_per_leaf", source, default=hosts, minimum=1)
    pods = _int(spec, "pods", source, default=None, minimum=1)
    raw_ratio = spec.get("oversubscription", 1)
    ratios = read_list(spec, "oversubscription", partial(as_number, quantity=FACTOR),
                       source=source, prefix="fabric.", default=[1.0], scalar=True,
                       max_length=2, what="a ratio or, with pods, a list [leaf, spine]")
    if len(ratios) != (2 if pods else 1):
        raise config_error(source, "fabric.oversubscription",
                           "one ratio (two tiers) or, with pods, [leaf, spine] (three tiers)",
                           raw_ratio)
    uplink_bw = _bandwidth(spec, "uplink_bandwidth", source, nic_bw)
    spine_lat = _latency(spec, "spine_latency", source, nic_lat)
    rails = read_bool(spec, "rail_optimized", source=source, prefix="fabric.", default=False)
    nics = _int(spec, "nics_per_host", source, default=per_host, minimum=1)
    b = FabricBuilder(hosts * per_host, source)
    scale_up = _section(spec, "scale_up", source)
    host_switch = []
    if scale_up and per_host > 1:
        up_bw = _bandwidth(scale_up, "bandwidth", source, prefix="fabric.scale_up.")
        up_lat = _latency(scale_up, "latency", source, 100.0, prefix="fabric.scale_up.")
        for h in range(hosts):
            host_switch.append(b.switch(f"host{h}.sw", "fabric"))
            for g in range(per_host):
                b.link(h * per_host + g, host_switch[h], up_bw, up_lat)
    if nics != per_host and not host_switch:
        raise config_error(source, "fabric.nics_per_host",
                           f"{per_host} (one per NPU) unless the host has a scale_up switch "
                           f"that leads to its NICs", nics)
    if hosts % per_leaf:
        raise config_error(source, "fabric.hosts_per_leaf", f"a divisor of hosts ({hosts})",
                           per_leaf)
    groups = hosts // per_leaf
    n_leaves = groups * (nics if rails else 1)
    down = per_leaf * (1 if rails else nics)  # NICs on each leaf
    uplinks = _ports(down * nic_bw, ratios[0], uplink_bw, source, "leaf")
    spines = _int(spec, "spines", source, default=uplinks, minimum=1)
    if uplinks % spines:
        raise config_error(source, "fabric.spines",
                           f"a divisor of the {uplinks} uplinks of each leaf", spines)
    leaves = [b.switch(f"leaf{i}", "fabric") for i in range(n_leaves)]
    for h in range(hosts):
        for n in range(nics):
            leaf = leaves[(h // per_leaf) * nics + n if rails else h // per_leaf]
            if nics == per_host:  # one NIC per NPU: the NPU's own port
                b.link(h * per_host + n, leaf, nic_bw, nic_lat)
            else:  # NICs behind the host's scale-up switch
                card = b.switch(f"host{h}.nic{n}", "fabric")
                b.link(host_switch[h], card, nic_bw, 0.0)
                b.link(card, leaf, nic_bw, nic_lat)
    _spine_tiers(b, spec, source, leaves, pods, spines, uplinks, ratios, uplink_bw, spine_lat)
    dims = (per_host, hosts) if per_host > 1 and hosts > 1 else (hosts * per_host,)
    return b, dims


def _spine_tiers(b: FabricBuilder, spec: Mapping[str, Any], source: str, leaves: list[int],
                 pods: int | None, spines: int, uplinks: int, ratios: list[float],
                 uplink_bw: float, spine_lat: float) -> None:
    """The spines above the leaves (per pod, with ``pods``) and, with pods, the super
    spines above every pod's spines."""
    n_leaves = len(leaves)
    n_pods = pods or 1
    if n_leaves % n_pods:
        raise config_error(source, "fabric.pods", f"a divisor of the {n_leaves} leaves", pods)
    per_pod = n_leaves // n_pods
    spine_ids = []
    for pod in range(n_pods):
        label = f"pod{pod}." if pods else ""
        pod_spines = [b.switch(f"{label}spine{j}", "fabric") for j in range(spines)]
        spine_ids.append(pod_spines)
        lower = {f"leaf{i}": leaves[i] for i in range(pod * per_pod, (pod + 1) * per_pod)}
        upper = {f"{label}spine{j}": spine for j, spine in enumerate(pod_spines)}
        b.connect_tiers(lower, upper, uplinks // spines, uplink_bw, spine_lat)
    if not pods:
        return
    # third tier: every pod spine to the super spines
    spine_down = per_pod * (uplinks // spines)
    up = _ports(spine_down * uplink_bw, ratios[1], uplink_bw, source, "spine")
    supers = _int(spec, "super_spines", source, default=up, minimum=1)
    if up % supers:
        raise config_error(source, "fabric.super_spines",
                           f"a divisor of the {up} uplinks of each spine", supers)
    top = [b.switch(f"super{t}", "fabric") for t in range(supers)]
    lower = {f"pod{pod}.spine{j}": spine for pod, pod_spines in enumerate(spine_ids)
             for j, spine in enumerate(pod_spines)}
    b.connect_tiers(lower, {f"super{t}": sup for t, sup in enumerate(top)},
                    up // supers, uplink_bw, spine_lat)


def _ports(down_bandwidth: float, ratio: float, port_bandwidth: float, source: str,
           tier: str) -> int:
    """Uplink ports of ``port_bandwidth`` giving ``down / up = ratio`` (a whole number)."""
    ports = down_bandwidth / (ratio * port_bandwidth)
    if ports < 1 or abs(ports - round(ports)) > 1e-9:
        raise config_error(source, "fabric.oversubscription",
                           f"a ratio giving a whole number of uplinks per {tier} "
                           f"({down_bandwidth:g} GB/s down, uplinks of {port_bandwidth:g} "
                           f"GB/s)", ratio)
    return int(round(ports))


def torus(spec: Mapping[str, Any], source: str, wrap: bool) -> Generated:
    """A ``dims``-shaped grid of NPUs with a link to each neighbour (and around, for a
    torus): keys ``dims``, ``bandwidth``, ``latency``; logical dims = ``dims``."""
    dims_t = tuple(read_list(spec, "dims", partial(as_int, minimum=2, maximum=MAX_FABRIC_NPUS),
                             source=source, prefix="fabric.", min_length=1,
                             max_length=MAX_DIMS, what="a list of sizes, e.g. [4, 4]"))
    bw = _bandwidth(spec, "bandwidth", source)
    lat = _latency(spec, "latency", source, 0.0)
    b = FabricBuilder(math.prod(dims_t), source)
    stride = 1
    for p in dims_t:
        for npu in range(b.npus):
            c = (npu // stride) % p
            if c + 1 < p:
                b.link(npu, npu + stride, bw, lat)
            elif wrap and p > 2:
                b.link(npu, npu - c * stride, bw, lat)
        stride *= p
    return b, dims_t


def fat_tree(spec: Mapping[str, Any], source: str) -> Generated:
    """A k-ary fat-tree (k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
    switches, k/2 hosts per edge switch): keys ``k`` (even), ``bandwidth``, ``latency``
    (every link), ``npus_per_host`` (default 1; each NPU has its own link to the edge
    switch). Non-blocking with one NPU per host; with ``n`` per host the edge switches are
    ``n``:1 oversubscribed. NPU ids go host by host."""
    k = _int(spec, "k", source, minimum=2)
    if k % 2:
        raise config_error(source, "fabric.k", "an even number", k)
    bw = _bandwidth(spec, "bandwidth", source)
    lat = _latency(spec, "latency", source, 0.0)
    per_host = _int(spec, "npus_per_host", source, default=1, minimum=1)
    half = k // 2
    hosts = k * half * half
    b = FabricBuilder(hosts * per_host, source)
    core = [b.switch(f"core{i}", "fabric") for i in range(half * half)]
    for pod in range(k):
        edges = [b.switch(f"pod{pod}.edge{i}", "fabric") for i in range(half)]
        aggs = [b.switch(f"pod{pod}.agg{i}", "fabric") for i in range(half)]
        for i, edge in enumerate(edges):
            for h in range(half):
                host = (pod * half + i) * half + h
                for g in range(per_host):
                    b.link(host * per_host + g, edge, bw, lat)
            for agg in aggs:
                b.link(edge, agg, bw, lat)
        for j, agg in enumerate(aggs):
            for c in range(half):
                b.link(agg, core[j * half + c], bw, lat)
    dims = (per_host, hosts) if per_host > 1 else (hosts,)
    return b, dims


def dragonfly(spec: Mapping[str, Any], source: str) -> Generated:
    """A dragonfly: ``groups`` (default ``a*h + 1``) of ``routers`` routers (``a``), all
    connected inside a group, each router with ``hosts_per_router`` NPUs (``p``) and
    ``global_links`` links to other groups (``h``); one global link between every two groups.
    Keys also ``bandwidth`` / ``latency`` (local) and ``global_bandwidth`` /
    ``global_latency``."""
    a = _int(spec, "routers", source, minimum=1)
    p = _int(spec, "hosts_per_router", source, minimum=1)
    h = _int(spec, "global_links", source, minimum=1)
    g = _int(spec, "groups", source, default=a * h + 1, minimum=2)
    if g - 1 > a * h:
        raise config_error(source, "fabric.groups",
                           f"at most routers x global_links + 1 = {a * h + 1}", g)
    bw = _bandwidth(spec, "bandwidth", source)
    lat = _latency(spec, "latency", source, 0.0)
    gbw = _bandwidth(spec, "global_bandwidth", source, bw)
    glat = _latency(spec, "global_latency", source, lat)
    b = FabricBuilder(g * a * p, source)
    routers = [[b.switch(f"g{i}.r{r}", "fabric") for r in range(a)] for i in range(g)]
    for i in range(g):
        for r in range(a):
            for k in range(p):
                b.link((i * a + r) * p + k, routers[i][r], bw, lat)
            for r2 in range(r + 1, a):
                b.link(routers[i][r], routers[i][r2], bw, lat)
    for i in range(g):
        for j in range(i + 1, g):
            # the router of group i that owns the link to group j, and vice versa
            ri = ((j - i - 1) % g) // h
            rj = ((i - j - 1) % g) // h
            b.link(routers[i][ri], routers[j][rj], gbw, glat)
    return b, (p, a, g) if p > 1 else (a, g)


#: Generators by the name of the ``generator`` key, and the keys each reads.
GENERATORS: dict[str, tuple[Callable[[Mapping[str, Any], str], Generated], frozenset[str]]] = {
    "leaf_spine": (leaf_spine, LEAF_SPINE_KEYS),
    "clos": (leaf_spine, LEAF_SPINE_KEYS),
    "fat_tree": (fat_tree, frozenset({"k", "bandwidth", "latency", "npus_per_host"})),
    "dragonfly": (dragonfly, frozenset({"routers", "hosts_per_router", "global_links",
                                        "groups", "bandwidth", "latency", "global_bandwidth",
                                        "global_latency"})),
    "torus": (partial(torus, wrap=True), TORUS_KEYS),
    "mesh": (partial(torus, wrap=False), TORUS_KEYS),
}
