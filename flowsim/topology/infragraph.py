"""InfraGraph input: an InfraGraph ``Infrastructure`` (https://infragraph.dev, the
``infragraph`` package, an optional extra) as a flowsim fabric.

A network file points at the description and says how collectives see it::

    infragraph: pod.infragraph.yaml     # path (relative to this file) or an inline mapping
    logical_dims: [8, 2]                # default: [number of xpus]
    routing: ecmp                       # or hash; fail / degrade as for fabrics
    default_bandwidth: 450              # GB/s for InfraGraph links that give none (optional)

Mapping (strict: what InfraGraph's own expansion passes over silently is an error here):

* every component of every device instance becomes a node ``instance.k.component.j`` (nested
  devices extend the name: ``host.0.nic.1.port.0``); ``xpu`` components are the NPUs, in
  expansion order; every other node (switches, NICs, ports, CPUs, ...) forwards traffic;
* device edges are copied into every instance, infrastructure edges join instances;
  endpoints take Python slices (``xpu[0:4]``, ``nic[-1]``); ``one2one`` pairs the two lists
  (which must be as long), ``many2many`` every pair; each edge is a duplex link;
* bandwidth in ``gigabits_per_second`` or ``gigabytes_per_second`` (10^9 B/s) is converted to
  flowsim's GB/s (2^30 B/s, ASTRA-sim's); latency in ``ns``, ``us`` or ``ms``.

When the ``infragraph`` package is installed the description is also validated by it, and its
error is reported with the file name. Expansion is capped as fabrics are
(:mod:`.fabric_builder`): a description that expands to more nodes or links stops early.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io import read_mapping
from .._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    as_config,
    as_int,
    as_mapping,
    as_number,
    as_str,
    check_unknown_keys,
    read_number,
)
from ..errors import ConfigError, describe
from .fabric_builder import MAX_FABRIC_LINKS, MAX_FABRIC_NODES
from .fabric_config import FabricConfig, finish_fabric

_ENDPOINT = re.compile(r"^([A-Za-z0-9_\-()<> ]+)(?:\[([^\]]*)\])?$")
_GIB_PER_GB = 1e9 / 2**30  # one 10^9-byte GB in ASTRA-sim "GB" (2^30 bytes)
_WRAPPER_KEYS = {"infragraph", "logical_dims", "routing", "fail", "degrade",
                 "default_bandwidth"}
#: InfraGraph bandwidth units and their factor to flowsim's GB/s (2^30 B/s).
_BANDWIDTH_UNITS = {"gigabits_per_second": _GIB_PER_GB / 8,
                    "gigabytes_per_second": _GIB_PER_GB}
#: InfraGraph latency units and their factor to ns.
_LATENCY_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6}


class _Expander:
    """Expands devices, instances and edges into named nodes and node pairs."""

    def __init__(self, infra: Mapping[str, Any], where: str) -> None:
        self.where = where
        self.devices = self.named(infra, "devices", "infrastructure")
        self.infra_links = self.named(infra, "links", "infrastructure")
        self.expanding: list[str] = []
        self.nodes: list[tuple[str, str]] = []
        self.edges: list[tuple[str, str, Mapping[str, Any], str]] = []
        self.work = 0   # device expansions and nodes: bounded like a fabric's nodes

    def entries(self, parent: Mapping[str, Any], key: str,
                owner: str) -> list[Mapping[str, Any]]:
        """A list of mappings under ``key`` (e.g. devices, components, edges)."""
        items = parent.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise self.fail(f"'{owner}' {key}", "expected a list of mappings")
        return items

    def named(self, parent: Mapping[str, Any], key: str, owner: str
              ) -> dict[str, Mapping[str, Any]]:
        """The entries under ``key`` by their ``name`` (a non-empty string)."""
        out = {}
        for i, item in enumerate(self.entries(parent, key, owner)):
            out[as_str(item.get("name"), source=self.where, key=f"{key}[{i}].name")] = item
        return out

    def fail(self, element: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {element}: {message}")

    def device(self, name: Any, element: str) -> Mapping[str, Any]:
        if not isinstance(name, str) or name not in self.devices:
            raise self.fail(element, f"unknown device {describe(name)}")
        return self.devices[name]

    def count(self, item: Mapping[str, Any], key: str) -> int:
        """The ``count`` of a component or an instance."""
        return as_int(item.get("count"), source=self.where, key=f"{key}.count", minimum=1,
                      maximum=MAX_FABRIC_NODES)

    def charge(self, amount: int, element: str) -> None:
        """Count expansion work; stop once it exceeds what a fabric may hold."""
        self.work += amount
        if self.work > MAX_FABRIC_NODES or len(self.edges) > MAX_FABRIC_LINKS:
            raise self.fail(element, f"the description expands to more than "
                            f"{MAX_FABRIC_NODES} nodes or {MAX_FABRIC_LINKS} links; flowsim "
                            f"routes fabrics up to that size")

    @staticmethod
    def indices(text: str | None, count: int, element: str, where: str) -> list[int]:
        if text is None or text.strip() == "":
            return list(range(count))
        try:
            if len(text) > 64:
                raise ValueError
            if ":" not in text:
                i = int(text)
                i = i + count if i < 0 else i
                if not 0 <= i < count:
                    raise ValueError
                return [i]
            parts = [int(p) if p.strip() else None for p in text.split(":")]
            if len(parts) > 3 or any(v is not None and not -count <= v <= count
                                     for v in parts[:2]) or parts[2:] == [0]:
                raise ValueError  # unlike InfraGraph, no silent clipping
            chosen = list(range(*slice(*parts).indices(count)))
        except ValueError:
            raise ConfigError(f"{where}: {element}: index or slice [{text[:64]}] outside "
                              f"0..{count - 1}") from None
        if not chosen:
            raise ConfigError(f"{where}: {element}: slice [{text}] selects nothing "
                              f"(count {count})")
        return chosen

    def expand_device(self, name: Any, prefix: str, element: str) -> None:
        device = self.device(name, element)
        if name in self.expanding:
            raise self.fail(element, f"device '{name}' contains itself "
                            f"({' > '.join(self.expanding + [name])})")
        self.expanding.append(name)
        for c, comp in enumerate(self.entries(device, "components", name)):
            cname = as_str(comp.get("name"), source=self.where,
                           key=f"devices.{name}.components[{c}].name")
            count = self.count(comp, f"devices.{name}.components.{cname}")
            choice = comp.get("choice")
            self.charge(count, f"{element} component '{cname}'")
            for j in range(count):
                path = f"{prefix}.{cname}.{j}"
                if choice == "device":
                    self.expand_device(cname, path, f"{element} > {cname}")
                elif choice == "custom":
                    custom = as_mapping(comp.get("custom") or {}, source=self.where,
                                        key=f"devices.{name}.components.{cname}.custom")
                    self.nodes.append((path, str(custom.get("type", "custom"))))
                else:
                    self.nodes.append((path, str(choice)))
        links = self.named(device, "links", name)
        for i, edge in enumerate(self.entries(device, "edges", name)):
            label = f"device '{name}' edges[{i}]"
            ends = []
            for key in ("ep1", "ep2"):
                ep = self.endpoint(edge, key, label)
                path = (f"{ep['device']}." if ep.get("device") else "") + \
                    str(ep.get("component"))
                ends.append([f"{prefix}.{rel}" for rel in self.paths(device, path, label)])
            self.connect(ends[0], ends[1], edge, links, label)
        self.expanding.pop()

    def endpoint(self, edge: Mapping[str, Any], key: str, label: str) -> Mapping[str, Any]:
        return as_mapping(edge.get(key) or {}, source=self.where, key=f"{label}.{key}")

    def paths(self, device: Mapping[str, Any], path: str, element: str) -> list[str]:
        """``cx5[0].port[1:3]`` inside ``device`` -> ``["cx5.0.port.1", "cx5.0.port.2"]``."""
        out = [""]
        current = device
        for part in path.split("."):
            match = _ENDPOINT.match(part)
            comps = {c.get("name"): c for c in self.entries(current, "components",
                                                             str(current.get("name")))}
            if match is None or match.group(1) not in comps:
                raise self.fail(element, f"unknown component '{part[:80]}' in device "
                                f"'{current.get('name')}'")
            comp = comps[match.group(1)]
            count = self.count(comp, f"devices.{current.get('name')}.components."
                                     f"{match.group(1)}")
            picks = self.indices(match.group(2), count, element, self.where)
            self.charge(len(out) * len(picks), element)
            out = [f"{p}.{match.group(1)}.{j}".lstrip(".") for p in out for j in picks]
            if comp.get("choice") == "device":
                current = self.device(match.group(1), element)
        return out

    def connect(self, a: list[str], b: list[str], edge: Mapping[str, Any],
                links: Mapping[str, Any], element: str) -> None:
        scheme = edge.get("scheme")
        link_name = edge.get("link")
        if not isinstance(link_name, str) or link_name not in links:
            raise self.fail(element, f"unknown link {describe(link_name)}")
        if scheme == "one2one":
            if len(a) != len(b):
                raise self.fail(element, f"one2one between {len(a)} and {len(b)} endpoints")
            pairs = list(zip(a, b))
        elif scheme == "many2many":
            if len(a) * len(b) > MAX_FABRIC_LINKS:
                self.charge(MAX_FABRIC_NODES + 1, element)
            pairs = [(x, y) for x in a for y in b if x != y]
        else:
            raise self.fail(element, f"scheme {describe(scheme)} is not supported (one2one, "
                            f"many2many)")
        for x, y in pairs:
            self.edges.append((x, y, links[link_name], element))
        self.charge(0, element)

    def run(self, infra: Mapping[str, Any]) -> None:
        instances = self.named(infra, "instances", "infrastructure")
        for name, inst in instances.items():
            count = self.count(inst, f"instances.{name}")
            self.charge(count, f"instance '{name}'")
            for k in range(count):
                self.expand_device(inst.get("device"), f"{name}.{k}", f"instance '{name}'")
        for i, edge in enumerate(self.entries(infra, "edges", "infrastructure")):
            label = f"edges[{i}]"
            ends = []
            for key in ("ep1", "ep2"):
                ep = self.endpoint(edge, key, label)
                match = _ENDPOINT.match(str(ep.get("instance"))[:256])
                if match is None or match.group(1) not in instances:
                    raise self.fail(label, f"unknown instance {describe(ep.get('instance'))}")
                inst = instances[match.group(1)]
                picks = self.indices(match.group(2), inst["count"], label, self.where)
                device = self.device(inst.get("device"), label)
                rel = self.paths(device, str(ep.get("component")), label)
                self.charge(len(picks) * len(rel), label)
                ends.append([f"{match.group(1)}.{k}.{r}" for k in picks for r in rel])
            self.connect(ends[0], ends[1], edge, self.infra_links, label)


def _physical(link: Mapping[str, Any], part: str, where: str) -> Mapping[str, Any]:
    """``physical.<part>`` of a link (a mapping of unit -> value; absent: empty)."""
    physical = as_mapping(link.get("physical") or {}, source=where,
                          key=f"links.{link.get('name')}.physical")
    return as_mapping(physical.get(part) or {}, source=where,
                      key=f"links.{link.get('name')}.physical.{part}")


def _bandwidth_gbps(link: Mapping[str, Any], default: float | None, where: str) -> float:
    bandwidth = _physical(link, "bandwidth", where)
    for unit, factor in _BANDWIDTH_UNITS.items():
        if unit in bandwidth:
            return read_number(bandwidth, unit, source=where, quantity=BANDWIDTH_GBPS,
                               prefix=f"links.{link.get('name')}.physical.bandwidth.") * factor
    if default is not None:
        return default
    raise ConfigError(f"{where}: link '{link.get('name')}' has no bandwidth in "
                      f"gigabits_per_second or gigabytes_per_second (set default_bandwidth)")


def _latency_ns(link: Mapping[str, Any], where: str) -> float:
    latency = _physical(link, "latency", where)
    for unit, factor in _LATENCY_UNITS.items():
        if unit in latency:
            value = as_number(latency[unit], source=where, minimum=0.0,
                              maximum=LATENCY_NS.maximum / factor,
                              key=f"links.{link.get('name')}.physical.latency.{unit}")
            return value * factor
    return 0.0


def _validate_with_package(infra: Mapping[str, Any], where: str) -> None:
    try:
        from infragraph import Infrastructure
    except ImportError:
        return
    try:
        Infrastructure().deserialize(dict(infra)).validate()
    except Exception as exc:  # noqa: BLE001 - whatever the reference reader rejects
        raise ConfigError(f"{where}: not a valid InfraGraph description: "
                          f"{type(exc).__name__}: {exc}") from None


def parse_infragraph_config(data: Mapping[str, Any], source: str = "<dict>") -> FabricConfig:
    """A network config with an ``infragraph`` key -> :class:`FabricConfig`."""
    as_config(data, source=source, what="network")
    check_unknown_keys(data, _WRAPPER_KEYS, source=source)
    raw = data.get("infragraph")
    where = source
    if isinstance(raw, (str, os.PathLike)):
        path = Path(raw)
        if not path.is_absolute() and source not in ("<dict>",):
            path = Path(source).parent / path
        try:
            infra: Mapping[str, Any] = read_mapping(path, what="InfraGraph description")
        except ConfigError as exc:
            raise ConfigError(f"{source}: key 'infragraph': {exc}") from None
        where = str(path)
    elif isinstance(raw, Mapping):
        infra = raw
    else:
        raise ConfigError(f"{source}: key 'infragraph': expected a path or a mapping, "
                          f"found {describe(raw)}")
    _validate_with_package(infra, where)
    expander = _Expander(infra, where)
    expander.run(infra)
    default_gbps = read_number(data, "default_bandwidth", source=source, default=None,
                               quantity=BANDWIDTH_GBPS)
    npu_names = [name for name, kind in expander.nodes if kind == "xpu"]
    if len(npu_names) < 2:
        raise ConfigError(f"{where}: expected at least 2 xpu components (the NPUs), found "
                          f"{len(npu_names)}")
    others = [name for name, kind in expander.nodes if kind != "xpu"]
    names = npu_names + others
    index = {name: i for i, name in enumerate(names)}
    # one duplex link per node pair, as InfraGraph's graph has
    pairs: dict[frozenset, tuple[str, str, Mapping[str, Any]]] = {}
    for a, b, link, element in expander.edges:
        if a not in index or b not in index:
            raise ConfigError(f"{where}: {element}: endpoint {a if a not in index else b} "
                              f"is not a component node")
        pairs[frozenset((a, b))] = (a, b, link)
    src, dst, bws, lats, link_names = [], [], [], [], []
    for a, b, link in pairs.values():
        bw = _bandwidth_gbps(link, default_gbps, where)
        lat = _latency_ns(link, where)
        for x, y in ((a, b), (b, a)):
            src.append(index[x])
            dst.append(index[y])
            bws.append(bw)
            lats.append(lat)
            link_names.append(f"{x}->{y}")
    fabric = {"logical_dims": data.get("logical_dims", [len(npu_names)]),
              "routing": data.get("routing", "ecmp"),
              "fail": data.get("fail"), "degrade": data.get("degrade")}
    return finish_fabric(len(npu_names), names, list(zip(src, dst, bws, lats, link_names)),
                         fabric, source, default_dims=None, prefix="")

