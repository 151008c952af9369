"""Fabric configs: explicit graphs and generators into a :class:`FabricConfig`.

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
see the functions of the same names in :mod:`.fabric_generators`. Duplex links are named
``a->b`` and ``b->a``. Bandwidths and latencies take the ranges of :mod:`flowsim._validate`;
sizes are capped as :mod:`.fabric_builder` says.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from .._validate import (
    BANDWIDTH_GBPS,
    FACTOR,
    LATENCY_NS,
    as_choice,
    as_config,
    as_int,
    as_list,
    as_mapping,
    as_number,
    as_str,
    check_unknown_keys,
    choices_of,
    read_bool,
    read_choice,
    read_int,
    read_list,
    read_mapping,
    read_number,
)
from ..errors import ConfigError, config_error
from .fabric_builder import MAX_FABRIC_NPUS, FabricBuilder, Link, check_routable
from .fabric_generators import GENERATORS
from .network_config import MAX_DIMS

#: How a fabric spreads a message over equal-cost paths: ``ecmp`` splits it at every hop
#: (per-packet spraying), ``hash`` keeps it on one path (per-flow hashing).
Routing = Literal["ecmp", "hash"]
ROUTINGS: tuple[Routing, ...] = choices_of(Routing)
#: Most ``fail`` or ``degrade`` patterns (each is matched against every link).
MAX_PATTERNS = 64

_COMMON_KEYS = {"logical_dims", "routing", "fail", "degrade", "generator"}
_FABRIC_KEYS = _COMMON_KEYS | {"npus", "switches", "links"}
_LINK_KEYS = ("src", "dst", "bandwidth", "latency", "duplex", "name")


@dataclass(frozen=True, kw_only=True)
class FabricConfig:
    """A validated fabric (hashable).

    Attributes
    ----------
    npus : int
    node_names : tuple of str
        Every node, NPUs first (``npu0`` ...).
    link_src, link_dst : tuple of int
        Node indices of every directed link.
    bandwidth_gbps, latency_ns : tuple of float
        Per directed link.
    link_names : tuple of str
    logical_dims : tuple of int
    routing : {"ecmp", "hash"}
    """

    npus: int
    node_names: tuple[str, ...]
    link_src: tuple[int, ...]
    link_dst: tuple[int, ...]
    bandwidth_gbps: tuple[float, ...]
    latency_ns: tuple[float, ...]
    link_names: tuple[str, ...]
    logical_dims: tuple[int, ...]
    routing: Routing = "ecmp"
    #: the accelerator of every NPU (a preset name of :mod:`flowsim.compute`), if known
    device: str | None = None
    #: the bundled system a run takes when it is given none (a cluster preset's)
    system: str | None = None
    source: str = field(default="<dict>", compare=False)

    # the attributes of a multi-dimensional config that the system layer reads
    @property
    def ndims(self) -> int:
        return len(self.logical_dims)

    @property
    def npus_count(self) -> tuple[int, ...]:
        return self.logical_dims

    @property
    def topology(self) -> tuple[str, ...]:
        return ("Fabric",) * self.ndims

    @property
    def in_network_reduction(self) -> tuple[bool, ...]:
        return (False,) * self.ndims


def parse_fabric_config(data: Mapping[str, Any], source: str = "<dict>") -> FabricConfig:
    """Validate a ``fabric:`` network config (see the module docstring)."""
    as_config(data, source=source, what="network")
    fabric = read_mapping(data, "fabric", source=source,
                          what="a mapping describing the fabric")
    if "generator" not in fabric:
        check_unknown_keys(fabric, _FABRIC_KEYS, source=source, prefix="fabric.")
        builder, dims = _explicit(fabric, source), None
    else:
        name = read_choice(fabric, "generator", tuple(GENERATORS), source=source,
                           prefix="fabric.")
        generate, keys = GENERATORS[name]
        check_unknown_keys(fabric, _COMMON_KEYS | keys, source=source, prefix="fabric.")
        builder, dims = generate(fabric, source)
    config = finish_fabric(builder.npus, builder.names, builder.links, fabric, source,
                           default_dims=dims)
    if data.get("device") is None:
        return config
    from dataclasses import replace

    from .network_config import read_device

    return replace(config, device=read_device(data, source))


def finish_fabric(npus: int, names: list[str], links: list[Link], fabric: Mapping[str, Any],
                  source: str, default_dims: tuple[int, ...] | None,
                  prefix: str = "fabric.") -> FabricConfig:
    """Failures, connectivity, logical dims and routing: the checks every fabric passes.
    ``prefix`` is how keys are named in errors (``fabric.`` or nothing, for InfraGraph)."""
    check_routable(npus, len(names), links, source)
    links = _apply_failures(names, links, fabric, source, prefix)
    connected = {a for a, *_ in links} | {b for _, b, *_ in links}
    for npu in range(npus):
        if npu not in connected:
            raise ConfigError(f"{source}: NPU {names[npu]} has no links (disconnected)")
    raw_dims = fabric.get("logical_dims")
    if raw_dims is None:
        raw_dims = list(default_dims) if default_dims else [npus]
    logical = tuple(as_list(raw_dims, partial(as_int, minimum=1, maximum=MAX_FABRIC_NPUS),
                            source=source, key=f"{prefix}logical_dims", min_length=1,
                            max_length=MAX_DIMS, what="a list of sizes"))
    if math.prod(logical) != npus:
        raise config_error(source, f"{prefix}logical_dims",
                           f"sizes whose product is the NPU count {npus}", raw_dims)
    routing = fabric.get("routing") or "ecmp"
    routing = as_choice(routing, ROUTINGS, source=source, key=f"{prefix}routing")
    return FabricConfig(npus=npus, node_names=tuple(names),
                        link_src=tuple(a for a, *_ in links),
                        link_dst=tuple(b for _, b, *_ in links),
                        bandwidth_gbps=tuple(link[2] for link in links),
                        latency_ns=tuple(link[3] for link in links),
                        link_names=tuple(link[4] for link in links),
                        logical_dims=logical, routing=routing, source=source)


def _explicit(fabric: Mapping[str, Any], source: str) -> FabricBuilder:
    """An explicit fabric: ``npus``, ``switches`` and ``links``."""
    builder = FabricBuilder(read_int(fabric, "npus", source=source, prefix="fabric.",
                                     minimum=2), source, "fabric.npus")
    switches: list[Any] = as_list(fabric.get("switches") or [], source=source,
                                  key="fabric.switches", what="a list of switch names")
    for i, name in enumerate(switches):
        builder.switch(name, f"fabric.switches[{i}]")
    links: list[Any] = read_list(fabric, "links", source=source, prefix="fabric.", min_length=1,
                                 what="a non-empty list of links")
    for i, item in enumerate(links):
        key = f"fabric.links[{i}]"
        if isinstance(item, list):
            if len(item) != 4:
                raise config_error(source, key, "[a, b, bandwidth GB/s, latency ns]", item)
            spec: Mapping[str, Any] = dict(zip(("src", "dst", "bandwidth", "latency"), item))
        else:
            spec = as_mapping(item, source=source, key=key,
                              what="a list [a, b, bw, lat] or a mapping")
            check_unknown_keys(spec, _LINK_KEYS, source=source, prefix=f"{key}.")
        a = builder.node(spec.get("src"), f"{key}.src")
        b = builder.node(spec.get("dst"), f"{key}.dst")
        if a == b:
            raise config_error(source, key, "a link between two different nodes", item)
        name = None if spec.get("name") is None else \
            as_str(spec["name"], source=source, key=f"{key}.name")
        builder.link(a, b,
                     read_number(spec, "bandwidth", source=source, prefix=f"{key}.",
                                 quantity=BANDWIDTH_GBPS),
                     read_number(spec, "latency", source=source, prefix=f"{key}.",
                                 quantity=LATENCY_NS),
                     read_bool(spec, "duplex", source=source, prefix=f"{key}.", default=True),
                     name)
    return builder


def _apply_failures(names: list[str], links: list[Link], fabric: Mapping[str, Any],
                    source: str, prefix: str) -> list[Link]:
    """The links left after ``fail`` (links or nodes whose name matches a glob pattern are
    taken out) and with ``degrade`` (the bandwidth of matching links scaled)."""
    pattern_list = partial(as_str, max_length=1024)
    fail = as_list(fabric.get("fail") or [], pattern_list, source=source, key=f"{prefix}fail",
                   max_length=MAX_PATTERNS, what="a list of link or node names (globs)")
    links = list(links)
    for i, pattern in enumerate(fail):
        match = re.compile(fnmatch.translate(pattern)).match
        keep = [link for link in links if not (match(link[4]) or match(names[link[0]])
                                               or match(names[link[1]]))]
        if len(keep) == len(links):
            raise config_error(source, f"{prefix}fail[{i}]", "a pattern matching a link or node",
                               pattern)
        links = keep
    degrade = fabric.get("degrade") or {}
    degrade = as_mapping(degrade, source=source, key=f"{prefix}degrade",
                         what="a mapping of pattern -> factor")
    if len(degrade) > MAX_PATTERNS:
        raise config_error(source, f"{prefix}degrade", f"at most {MAX_PATTERNS} patterns",
                           degrade)
    for pattern, factor in degrade.items():
        if not isinstance(pattern, str):
            raise config_error(source, f"{prefix}degrade", "names or glob patterns as keys",
                               pattern)
        f = as_number(factor, source=source, key=f"{prefix}degrade[{pattern}]", quantity=FACTOR)
        match = re.compile(fnmatch.translate(pattern)).match
        hit = False
        for k, link in enumerate(links):
            if match(link[4]):
                links[k] = (link[0], link[1], link[2] * f, link[3], link[4])
                hit = True
        if not hit:
            raise config_error(source, f"{prefix}degrade[{pattern}]", "a pattern matching a link",
                               pattern)
    return links
