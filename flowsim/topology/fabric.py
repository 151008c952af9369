"""Fabric configs: explicit graphs and generators into a :class:`~.graph.FabricConfig`.

Explicit::

    fabric:
      npus: 4
      switches: [s0, s1]
      links:                       # duplex unless said otherwise
        - [npu0, s0, 100, 500]     # a, b, bandwidth GB/s (2^30 B/s), latency ns
        - {src: s0, dst: s1, bandwidth: 200, latency: 500, duplex: false, name: trunk}
      logical_dims: [2, 2]         # default [npus]
      routing: ecmp                # or hash
      fail: ["s0->s1"]             # link or node names (glob patterns) taken out
      degrade: {"s1->*": 0.5}      # bandwidth factors

Generators (``generator: leaf_spine``, ``fat_tree``, ``dragonfly``, ``torus`` or ``mesh``):
see the functions of the same names. Duplex links are named ``a->b`` and ``b->a``.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, config_error, unknown_key_error
from .config import MAX_NPUS
from .graph import ROUTINGS, FabricConfig

_COMMON_KEYS = {"logical_dims", "routing", "fail", "degrade", "generator"}
_FABRIC_KEYS = _COMMON_KEYS | {"npus", "switches", "links"}
_GENERATOR_KEYS = {
    "leaf_spine": {"hosts", "npus_per_host", "scale_up", "nic", "hosts_per_leaf",
                   "oversubscription", "uplink_bandwidth", "spine_latency", "rail_optimized",
                   "nics_per_host", "spines", "pods", "super_spines"},
    "fat_tree": {"k", "bandwidth", "latency", "npus_per_host"},
    "dragonfly": {"routers", "hosts_per_router", "global_links", "groups", "bandwidth",
                  "latency", "global_bandwidth", "global_latency"},
    "torus": {"dims", "bandwidth", "latency"},
}
_GENERATOR_KEYS["clos"] = _GENERATOR_KEYS["leaf_spine"]
_GENERATOR_KEYS["mesh"] = _GENERATOR_KEYS["torus"]


def _mapping(value: Any, source: str, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise config_error(source, key, "a mapping such as {bandwidth: 50, latency: 500}",
                           value)
    return value


def _number(value: Any, source: str, key: str, *, positive: bool) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and \
        math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        raise config_error(source, key, "a number > 0" if positive else "a number >= 0", value)
    return float(value)


def _integer(value: Any, source: str, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise config_error(source, key, f"an integer >= {minimum}", value)
    return value


class _Builder:
    """Collects nodes and directed links, checking names as it goes."""

    def __init__(self, npus: int, source: str) -> None:
        if npus > MAX_NPUS:
            raise config_error(source, "fabric", f"at most {MAX_NPUS} NPUs", npus)
        self.source = source
        self.npus = npus
        self.names = [f"npu{i}" for i in range(npus)]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.links: list[tuple[int, int, float, float, str]] = []

    def switch(self, name: str, key: str) -> int:
        if not isinstance(name, str) or not name or name in self.index:
            raise config_error(self.source, key, "a new, non-empty switch name", name)
        self.index[name] = len(self.names)
        self.names.append(name)
        return self.index[name]

    def node(self, ref: Any, key: str) -> int:
        if isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref < self.npus:
            return ref
        if isinstance(ref, str) and ref in self.index:
            return self.index[ref]
        raise config_error(self.source, key, f"an NPU (npu0..npu{self.npus - 1}) or a declared "
                           f"switch", ref)

    def link(self, a: int, b: int, bandwidth: float, latency: float, duplex: bool = True,
             name: str | None = None, back_name: str | None = None) -> None:
        forward = name or f"{self.names[a]}->{self.names[b]}"
        self.links.append((a, b, bandwidth, latency, forward))
        if duplex:
            back = back_name or (f"{name}:back" if name else
                                 f"{self.names[b]}->{self.names[a]}")
            self.links.append((b, a, bandwidth, latency, back))

    def connect_tiers(self, lower: dict[str, int], upper: dict[str, int], parallel: int,
                      bandwidth: float, latency: float) -> None:
        """Every node of ``lower`` to every node of ``upper`` with ``parallel`` duplex links,
        named ``low->up`` (``#k`` for parallel ones) and ``up->low`` back."""
        for low_name, low in lower.items():
            for up_name, up in upper.items():
                for k in range(parallel):
                    suffix = f"#{k}" if parallel > 1 else ""
                    self.link(low, up, bandwidth, latency, name=f"{low_name}->{up_name}{suffix}",
                              back_name=f"{up_name}->{low_name}{suffix}")


def _explicit(fabric: Mapping[str, Any], source: str) -> _Builder:
    builder = _Builder(_integer(fabric.get("npus"), source, "fabric.npus", 2), source)
    for i, name in enumerate(fabric.get("switches") or []):
        builder.switch(name, f"fabric.switches[{i}]")
    links = fabric.get("links")
    if not isinstance(links, list) or not links:
        raise config_error(source, "fabric.links", "a non-empty list of links", links)
    for i, item in enumerate(links):
        key = f"fabric.links[{i}]"
        if isinstance(item, list):
            if len(item) != 4:
                raise config_error(source, key, "[a, b, bandwidth GB/s, latency ns]", item)
            spec = dict(zip(("src", "dst", "bandwidth", "latency"), item))
        elif isinstance(item, Mapping):
            spec = dict(item)
            extra = set(spec) - {"src", "dst", "bandwidth", "latency", "duplex", "name"}
            if extra:
                raise unknown_key_error(source, f"{key}.{sorted(extra)[0]}",
                                        ("src", "dst", "bandwidth", "latency", "duplex", "name"))
        else:
            raise config_error(source, key, "a list [a, b, bw, lat] or a mapping", item)
        a = builder.node(spec.get("src"), f"{key}.src")
        b = builder.node(spec.get("dst"), f"{key}.dst")
        if a == b:
            raise config_error(source, key, "a link between two different nodes", item)
        name = spec.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise config_error(source, f"{key}.name", "a non-empty string", name)
        builder.link(a, b, _number(spec.get("bandwidth"), source, f"{key}.bandwidth",
                                   positive=True),
                     _number(spec.get("latency"), source, f"{key}.latency", positive=False),
                     bool(spec.get("duplex", True)), spec.get("name"))
    return builder


def leaf_spine(spec: Mapping[str, Any], source: str) -> tuple[_Builder, tuple[int, ...]]:
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
    hosts = _integer(spec.get("hosts"), source, "fabric.hosts", 1)
    per_host = _integer(spec.get("npus_per_host", 1), source, "fabric.npus_per_host", 1)
    if hosts * per_host < 2:
        raise config_error(source, "fabric.hosts", "at least 2 NPUs in total", hosts)
    nic = _mapping(spec.get("nic"), source, "fabric.nic")
    nic_bw = _number(nic.get("bandwidth"), source, "fabric.nic.bandwidth", positive=True)
    nic_lat = _number(nic.get("latency", 500), source, "fabric.nic.latency", positive=False)
    per_leaf = _integer(spec.get("hosts_per_leaf", hosts), source, "fabric.hosts_per_leaf", 1)
    raw_ratio = spec.get("oversubscription", 1)
    ratios = raw_ratio if isinstance(raw_ratio, list) else [raw_ratio]
    ratios = [_number(r, source, f"fabric.oversubscription[{i}]", positive=True)
              for i, r in enumerate(ratios)]
    pods = spec.get("pods")
    if len(ratios) != (2 if pods else 1):
        raise config_error(source, "fabric.oversubscription",
                           "one ratio (two tiers) or, with pods, [leaf, spine] (three tiers)",
                           raw_ratio)
    uplink_bw = _number(spec.get("uplink_bandwidth", nic_bw), source,
                        "fabric.uplink_bandwidth", positive=True)
    spine_lat = _number(spec.get("spine_latency", nic_lat), source, "fabric.spine_latency",
                        positive=False)
    rails = bool(spec.get("rail_optimized", False))
    nics = _integer(spec.get("nics_per_host", per_host), source, "fabric.nics_per_host", 1)
    b = _Builder(hosts * per_host, source)
    scale_up = _mapping(spec.get("scale_up"), source, "fabric.scale_up")
    host_switch = []
    if scale_up and per_host > 1:
        up_bw = _number(scale_up.get("bandwidth"), source, "fabric.scale_up.bandwidth",
                        positive=True)
        up_lat = _number(scale_up.get("latency", 100), source, "fabric.scale_up.latency",
                         positive=False)
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
    spines = _integer(spec.get("spines", uplinks), source, "fabric.spines", 1)
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
    n_pods = _integer(pods, source, "fabric.pods", 1) if pods else 1
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
    if pods:  # third tier: every pod spine to the super spines
        spine_down = per_pod * (uplinks // spines)
        up = _ports(spine_down * uplink_bw, ratios[1], uplink_bw, source, "spine")
        supers = _integer(spec.get("super_spines", up), source, "fabric.super_spines", 1)
        if up % supers:
            raise config_error(source, "fabric.super_spines",
                               f"a divisor of the {up} uplinks of each spine", supers)
        top = [b.switch(f"super{t}", "fabric") for t in range(supers)]
        lower = {f"pod{pod}.spine{j}": spine for pod, pod_spines in enumerate(spine_ids)
                 for j, spine in enumerate(pod_spines)}
        b.connect_tiers(lower, {f"super{t}": sup for t, sup in enumerate(top)},
                        up // supers, uplink_bw, spine_lat)
    dims = (per_host, hosts) if per_host > 1 and hosts > 1 else (hosts * per_host,)
    return b, dims


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


def torus(spec: Mapping[str, Any], source: str, wrap: bool) -> tuple[_Builder, tuple[int, ...]]:
    """A ``dims``-shaped grid of NPUs with a link to each neighbour (and around, for a
    torus): keys ``dims``, ``bandwidth``, ``latency``; logical dims = ``dims``."""
    dims = spec.get("dims")
    if not isinstance(dims, list) or not dims:
        raise config_error(source, "fabric.dims", "a list of sizes, e.g. [4, 4]", dims)
    dims_t = tuple(_integer(d, source, f"fabric.dims[{i}]", 2) for i, d in enumerate(dims))
    bw = _number(spec.get("bandwidth"), source, "fabric.bandwidth", positive=True)
    lat = _number(spec.get("latency", 0), source, "fabric.latency", positive=False)
    b = _Builder(math.prod(dims_t), source)
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


def fat_tree(spec: Mapping[str, Any], source: str) -> tuple[_Builder, tuple[int, ...]]:
    """A k-ary fat-tree (k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
    switches, k/2 hosts per edge switch): keys ``k`` (even), ``bandwidth``, ``latency``
    (every link), ``npus_per_host`` (default 1; each NPU has its own link to the edge
    switch). Non-blocking with one NPU per host; with ``n`` per host the edge switches are
    ``n``:1 oversubscribed. NPU ids go host by host."""
    k = _integer(spec.get("k"), source, "fabric.k", 2)
    if k % 2:
        raise config_error(source, "fabric.k", "an even number", k)
    bw = _number(spec.get("bandwidth"), source, "fabric.bandwidth", positive=True)
    lat = _number(spec.get("latency", 0), source, "fabric.latency", positive=False)
    per_host = _integer(spec.get("npus_per_host", 1), source, "fabric.npus_per_host", 1)
    half = k // 2
    hosts = k * half * half
    b = _Builder(hosts * per_host, source)
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


def dragonfly(spec: Mapping[str, Any], source: str) -> tuple[_Builder, tuple[int, ...]]:
    """A dragonfly: ``groups`` (default ``a*h + 1``) of ``routers`` routers (``a``), all
    connected inside a group, each router with ``hosts_per_router`` NPUs (``p``) and
    ``global_links`` links to other groups (``h``); one global link between every two groups.
    Keys also ``bandwidth`` / ``latency`` (local) and ``global_bandwidth`` /
    ``global_latency``."""
    a = _integer(spec.get("routers"), source, "fabric.routers", 1)
    p = _integer(spec.get("hosts_per_router"), source, "fabric.hosts_per_router", 1)
    h = _integer(spec.get("global_links"), source, "fabric.global_links", 1)
    g = _integer(spec.get("groups", a * h + 1), source, "fabric.groups", 2)
    if g - 1 > a * h:
        raise config_error(source, "fabric.groups",
                           f"at most routers x global_links + 1 = {a * h + 1}", g)
    bw = _number(spec.get("bandwidth"), source, "fabric.bandwidth", positive=True)
    lat = _number(spec.get("latency", 0), source, "fabric.latency", positive=False)
    gbw = _number(spec.get("global_bandwidth", bw), source, "fabric.global_bandwidth",
                  positive=True)
    glat = _number(spec.get("global_latency", lat), source, "fabric.global_latency",
                   positive=False)
    b = _Builder(g * a * p, source)
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


def _apply_failures(b: _Builder, fabric: Mapping[str, Any], source: str,
                    prefix: str = "fabric.") -> list:
    links = list(b.links)
    fail = fabric.get("fail") or []
    if not isinstance(fail, list):
        raise config_error(source, f"{prefix}fail", "a list of link or node names (globs)", fail)
    for i, pattern in enumerate(fail):
        if not isinstance(pattern, str):
            raise config_error(source, f"{prefix}fail[{i}]", "a name or glob pattern", pattern)
        matched = [link for link in links if fnmatch.fnmatchcase(link[4], pattern)
                   or fnmatch.fnmatchcase(b.names[link[0]], pattern)
                   or fnmatch.fnmatchcase(b.names[link[1]], pattern)]
        if not matched:
            raise config_error(source, f"{prefix}fail[{i}]", "a pattern matching a link or node",
                               pattern)
        links = [link for link in links if link not in matched]
    degrade = fabric.get("degrade") or {}
    if not isinstance(degrade, Mapping):
        raise config_error(source, f"{prefix}degrade", "a mapping of pattern -> factor", degrade)
    for pattern, factor in degrade.items():
        if not isinstance(pattern, str):
            raise config_error(source, f"{prefix}degrade", "names or glob patterns as keys",
                               pattern)
        f = _number(factor, source, f"{prefix}degrade[{pattern}]", positive=True)
        hit = False
        for k, link in enumerate(links):
            if fnmatch.fnmatchcase(link[4], pattern):
                links[k] = (link[0], link[1], link[2] * f, link[3], link[4])
                hit = True
        if not hit:
            raise config_error(source, f"{prefix}degrade[{pattern}]", "a pattern matching a link",
                               pattern)
    return links


def parse_fabric_config(data: Mapping[str, Any], source: str = "<dict>") -> FabricConfig:
    """Validate a ``fabric:`` network config (see the module docstring)."""
    fabric = data.get("fabric")
    if not isinstance(fabric, Mapping):
        raise config_error(source, "fabric", "a mapping describing the fabric", fabric)
    generator = fabric.get("generator")
    if generator is None:
        unknown = set(fabric) - _FABRIC_KEYS
        if unknown:
            raise unknown_key_error(source, f"fabric.{sorted(unknown, key=str)[0]}",
                                    _FABRIC_KEYS)
        builder, dims = _explicit(fabric, source), None
    elif generator in _GENERATOR_KEYS and set(fabric) - _COMMON_KEYS - _GENERATOR_KEYS[generator]:
        unknown = set(fabric) - _COMMON_KEYS - _GENERATOR_KEYS[generator]
        raise unknown_key_error(source, f"fabric.{sorted(unknown, key=str)[0]}",
                                _COMMON_KEYS | _GENERATOR_KEYS[generator])
    elif generator in ("leaf_spine", "clos"):
        builder, dims = leaf_spine(fabric, source)
    elif generator in ("torus", "mesh"):
        builder, dims = torus(fabric, source, wrap=generator == "torus")
    elif generator == "fat_tree":
        builder, dims = fat_tree(fabric, source)
    elif generator == "dragonfly":
        builder, dims = dragonfly(fabric, source)
    else:
        raise config_error(source, "fabric.generator",
                           "leaf_spine, fat_tree, dragonfly, torus or mesh", generator)
    return finish_fabric(builder.npus, builder.names, builder.links, fabric, source,
                         default_dims=dims)


def finish_fabric(npus: int, names: list[str], links: list[tuple], fabric: Mapping[str, Any],
                  source: str, default_dims: tuple[int, ...] | None,
                  prefix: str = "fabric.") -> FabricConfig:
    """Failures, connectivity, logical dims and routing: the checks every fabric passes.
    ``prefix`` is how keys are named in errors (``fabric.`` or nothing, for InfraGraph)."""
    builder = _Builder(0, source)
    builder.npus, builder.names, builder.links = npus, list(names), list(links)
    links = _apply_failures(builder, fabric, source, prefix)
    connected = {a for a, *_ in links} | {b for _, b, *_ in links}
    for npu in range(npus):
        if npu not in connected:
            raise ConfigError(f"{source}: NPU {names[npu]} has no links (disconnected)")
    raw_dims = fabric.get("logical_dims")
    if raw_dims is None:
        raw_dims = list(default_dims) if default_dims else [npus]
    if not isinstance(raw_dims, list) or not raw_dims:
        raise config_error(source, f"{prefix}logical_dims", "a list of sizes", raw_dims)
    logical = tuple(_integer(d, source, f"{prefix}logical_dims[{i}]", 1)
                    for i, d in enumerate(raw_dims))
    if math.prod(logical) != npus:
        raise config_error(source, f"{prefix}logical_dims",
                           f"sizes whose product is the NPU count {npus}", raw_dims)
    routing = fabric.get("routing") or "ecmp"
    if routing not in ROUTINGS:
        raise config_error(source, f"{prefix}routing", "ecmp or hash", routing)
    return FabricConfig(npus=npus, node_names=tuple(names),
                        link_src=tuple(a for a, *_ in links),
                        link_dst=tuple(b for _, b, *_ in links),
                        bandwidth_gbps=tuple(link[2] for link in links),
                        latency_ns=tuple(link[3] for link in links),
                        link_names=tuple(link[4] for link in links),
                        logical_dims=logical, routing=routing, source=source)
