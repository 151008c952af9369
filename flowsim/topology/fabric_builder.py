"""The node and link lists of a fabric while it is being described (explicitly, by a generator
or from InfraGraph), with the size caps that keep a fabric routable.

Routing a fabric (:mod:`.fabric_routing`) holds tables of (anchor, node) entries, an anchor
being a node with a link into an NPU (a scale-up switch, a leaf), so a fabric is capped below a
multi-dimensional network: at most :data:`MAX_FABRIC_NPUS` NPUs, :data:`MAX_FABRIC_NODES`
nodes, :data:`MAX_FABRIC_LINKS` directed links, and :data:`MAX_ROUTING_ENTRIES` entries in
each routing table. The caps are
checked while the lists grow, so an absurd description stops after a bounded amount of work.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, config_error

#: Most NPUs of a fabric.
MAX_FABRIC_NPUS = 1 << 16
#: Most nodes (NPUs and switches) of a fabric.
MAX_FABRIC_NODES = 1 << 18
#: Most directed links of a fabric.
MAX_FABRIC_LINKS = 1 << 19
#: Most entries of a routing table (anchors x nodes): 2 GiB of float64 distances, ~9 GB at
#: the peak of routing (~34 bytes per entry with the next-link tables: the 24,576-GPU Clos of
#: Llama 3, 1.4e8 entries, peaks at 4.8 GB running an iteration)
MAX_ROUTING_ENTRIES = 1 << 28
#: bytes per routing-table entry at the peak of a run (distances, next links, pointers)
BYTES_PER_ENTRY = 34

#: One directed link: (source node, destination node, bandwidth GB/s, latency ns, name).
Link = tuple[int, int, float, float, str]


class FabricBuilder:
    """Collects nodes and directed links, checking names and caps as it goes.

    Nodes ``0..npus-1`` are the NPUs, named ``npu0``..; switches follow in the order they are
    declared.
    """

    def __init__(self, npus: int, source: str, key: str = "fabric") -> None:
        if npus > MAX_FABRIC_NPUS:
            raise config_error(source, key, f"a fabric of at most {MAX_FABRIC_NPUS} NPUs "
                               f"(routing tables grow with NPUs x nodes)", npus)
        self.source = source
        self.npus = npus
        self.names = [f"npu{i}" for i in range(npus)]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.links: list[Link] = []

    def switch(self, name: Any, key: str) -> int:
        """Declare a switch (or any forwarding node) and return its node id."""
        if not isinstance(name, str) or not name or name in self.index:
            raise config_error(self.source, key, "a new, non-empty switch name", name)
        if len(self.names) >= MAX_FABRIC_NODES:
            raise ConfigError(f"{self.source}: the fabric has more than {MAX_FABRIC_NODES} "
                              f"nodes (NPUs and switches); flowsim routes fabrics up to that "
                              f"size")
        self.index[name] = len(self.names)
        self.names.append(name)
        return self.index[name]

    def node(self, ref: Any, key: str) -> int:
        """The node id of an NPU index or a declared node name."""
        if isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref < self.npus:
            return ref
        if isinstance(ref, str) and ref in self.index:
            return self.index[ref]
        raise config_error(self.source, key, f"an NPU (npu0..npu{self.npus - 1}) or a declared "
                           f"switch", ref)

    def link(self, a: int, b: int, bandwidth: float, latency: float, duplex: bool = True,
             name: str | None = None, back_name: str | None = None) -> None:
        """A link ``a -> b`` (and, if ``duplex``, ``b -> a``), named ``a->b`` by default."""
        if len(self.links) + 2 > MAX_FABRIC_LINKS:
            raise ConfigError(f"{self.source}: the fabric has more than {MAX_FABRIC_LINKS} "
                              f"directed links; flowsim routes fabrics up to that size")
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


def check_routable(npus: int, nodes: int, links: list[Link], source: str) -> None:
    """The routing tables of a fabric of this size fit :data:`MAX_ROUTING_ENTRIES`."""
    anchors = len({a for a, b, *_ in links if b < npus})
    entries = anchors * nodes
    if entries > MAX_ROUTING_ENTRIES:
        raise ConfigError(f"{source}: a fabric of {npus} NPUs, {nodes} nodes and "
                          f"{anchors} nodes linked to NPUs needs routing tables of {entries} "
                          f"entries (those nodes x nodes, ~{entries * BYTES_PER_ENTRY / 1e9:.0f} "
                          f"GB to route), more than {MAX_ROUTING_ENTRIES}; the "
                          f"multi-dimensional form (cluster form: multidim) has no tables")
