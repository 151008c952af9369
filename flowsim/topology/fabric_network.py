"""Fabrics: networks given as a graph of nodes and links, routed by shortest paths with ECMP.

A fabric config (YAML key ``fabric``) lists NPUs, switches and links explicitly, or asks a
generator for them (see :mod:`.fabric_config`). Collectives see the fabric through *logical
dimensions* (``logical_dims``, e.g. ``[8, 128]``: 8 GPUs of a host, then 128 hosts) over the
NPU ids, dimension 0 fastest, as ASTRA-sim's ns-3 backend maps its logical topology onto the
physical one; every algorithm of the system layer runs unchanged.

Routing: shortest paths by latency (plus a tiny cost per hop, so zero-latency links count),
computed with ``scipy.sparse.csgraph`` to the switches that reach NPUs (tables of switches x
nodes, not NPUs x links: :mod:`.fabric_routing`). ``ecmp`` splits a message evenly at every
hop over the next hops on shortest paths (per-packet spraying: the fluid limit of ECMP);
``hash`` sends it on one of them, chosen by a deterministic hash of (source, destination), as
per-flow ECMP hashing does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .._arrays import gather_segments
from ..errors import RoutingError
from ..units import network_bandwidth_to_bytes_per_ns
from .fabric_config import FabricConfig
from .fabric_routing import RoutingTables, routing_tables, twin_link_groups
from .grid import LogicalGrid

#: Most links, summed over the paths, of the flows one routed step may give (~100 bytes each
#: in the flow engine: ~13 GB): ECMP spraying multiplies a message by its equal-cost paths.
MAX_PATH_LINKS = 1 << 27


@dataclass(frozen=True, eq=False)
class FabricNetwork(LogicalGrid):
    """A network built from a :class:`FabricConfig`; same interface as ``Network``."""

    config: FabricConfig
    link_src: np.ndarray
    link_dst: np.ndarray
    link_bandwidth: np.ndarray
    link_latency: np.ndarray
    link_dim: np.ndarray
    num_switches: int

    #: groups of a logical dimension share physical links: simulate them all
    replicable = False

    @classmethod
    def from_config(cls, config: FabricConfig) -> FabricNetwork:
        n_links = len(config.link_src)
        bandwidth = np.array([network_bandwidth_to_bytes_per_ns(b)
                              for b in config.bandwidth_gbps], np.float64)
        return cls(config=config, link_src=np.array(config.link_src, np.int64),
                   link_dst=np.array(config.link_dst, np.int64), link_bandwidth=bandwidth,
                   link_latency=np.array(config.latency_ns, np.float64),
                   link_dim=np.full(n_links, -1, np.int64),
                   num_switches=len(config.node_names) - config.npus)

    @property
    def npus(self) -> int:  # type: ignore[override]  # LogicalView: an attribute
        return self.config.npus

    @property
    def dims(self) -> tuple[int, ...]:  # type: ignore[override]  # as npus
        return self.config.logical_dims

    @property
    def num_nodes(self) -> int:
        return len(self.config.node_names)

    @property
    def num_links(self) -> int:
        return int(self.link_src.size)

    def switch_links(self, dim: int):
        raise RoutingError("in-network reduction is not modelled on fabrics")

    def tile_first_instance(self, per_link: np.ndarray) -> np.ndarray:
        """Not defined on a fabric: the groups of a logical dimension share physical links,
        so there are no replicated instances (:attr:`replicable` is False)."""
        raise RoutingError("a fabric has no replicated dimension instances: every group of a "
                           "logical dimension shares its physical links")

    # ------------------------------------------------------------------ routing
    @cached_property
    def _routing(self) -> RoutingTables:
        """Distances to the switches that reach NPUs and the next links toward them."""
        return routing_tables(self.link_src, self.link_dst, self.link_latency, self.npus,
                              self.num_nodes)

    @cached_property
    def _twins(self) -> tuple[np.ndarray, np.ndarray]:
        """Per link: the representative and size of its twin group (:func:`.fabric_routing.
        twin_link_groups`); every link its own group unless ECMP sprays over twins."""
        if self.config.routing == "ecmp" and self.twin_merging:
            rep, size = twin_link_groups(self.link_src, self.link_dst, self.link_bandwidth,
                                         self.link_latency, self.npus, self.num_nodes)
            if np.any(size > 1):
                return rep, size
        return np.arange(self.num_links, dtype=np.int64), np.ones(self.num_links, np.int64)

    #: merge twins where ECMP sprays over them (tests turn it off to compare)
    twin_merging = True

    @property
    def merges_twins(self) -> bool:  # type: ignore[override]  # computed
        """Routes merge the flows of twin links: ECMP spraying over a fabric with twins.

        The flows of a message that differ only by the twins they cross have equal max-min
        rates at every instant (the fabric, the routing and the traffic are invariant under
        swapping twins, and max-min rates are unique), so they travel as one flow counted
        as many times as it has copies, on one representative link per twin group that
        holds the group's capacity; per-link results are shared back evenly
        (:meth:`spread_links`).
        """
        return bool(self._twins[1].max(initial=1) > 1)

    @cached_property
    def engine_capacity(self) -> np.ndarray:
        rep, size = self._twins
        capacity = self.link_bandwidth.copy()
        heads = rep == np.arange(rep.size)
        capacity[heads] *= size[heads]
        return capacity

    def spread_links(self, link_bytes: np.ndarray,
                     link_busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.merges_twins:
            return link_bytes, link_busy
        rep, size = self._twins
        return link_bytes[rep] / size, link_busy[rep]

    @cached_property
    def _max_degree(self) -> int:
        """Most links out of one node."""
        return int(np.bincount(self.link_src, minlength=1).max()) if self.num_links else 0

    def routes_multipath(self, src: np.ndarray, dst: np.ndarray, *,
                         lowest_dim_only: bool = False) -> tuple[np.ndarray, ...]:
        """Shortest-path routes of NPU pairs as flows: ``(message, weight, indptr, links)``,
        every path its own flow.

        With ``ecmp`` a message is split evenly at every hop over the next links on shortest
        paths; with ``hash`` it takes one of them.

        Raises
        ------
        RoutingError
            For an NPU that does not exist or a pair with no path (e.g. after failures).
        """
        message, weight, _, indptr, links = self._flows(src, dst, merge=False)
        return message, weight, indptr, links

    def routes_merged(self, src: np.ndarray, dst: np.ndarray, *,
                      lowest_dim_only: bool = False) -> tuple[np.ndarray, ...]:
        """The routes of :meth:`routes_multipath` with flows over twins merged where this
        fabric merges them (:attr:`merges_twins`): ``(message, weight, multiplicity, indptr,
        links)``, ``weight`` each copy's share of the bytes."""
        return self._flows(src, dst, merge=self.merges_twins)

    def _flows(self, src: np.ndarray, dst: np.ndarray, *, merge: bool) -> tuple[np.ndarray, ...]:
        src = np.asarray(src, np.int64).ravel()
        dst = np.asarray(dst, np.int64).ravel()
        self.check_npus(src, dst)
        return _shortest_path_flows(self, src, dst, self.config.routing == "hash", merge)

    def routes(self, src: np.ndarray, dst: np.ndarray, *,
               lowest_dim_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """One path per pair (the hash choice), for callers that need single paths."""
        src = np.asarray(src, np.int64).ravel()
        dst = np.asarray(dst, np.int64).ravel()
        self.check_npus(src, dst)
        _, _, _, indptr, links = _shortest_path_flows(self, src, dst, True)
        return indptr, links


def path_kernel_args(net: FabricNetwork, src: np.ndarray, dst: np.ndarray, single: bool,
                     merge: bool = False) -> tuple:
    """The arguments of the path kernel for NPU pairs (hash routing keyed on the pair)."""
    hash_key = (src * 1_000_003 + dst * 998_244_353) % 2_147_483_647
    return (net._routing.kernel_tables(), np.ascontiguousarray(net.link_dst, np.int64),
            net._twins[0], merge, net._max_degree, np.ascontiguousarray(src, np.int64),
            np.ascontiguousarray(dst, np.int64), single, np.ascontiguousarray(hash_key, np.int64),
            net.num_nodes + 1, MAX_PATH_LINKS)


def _shortest_path_flows(net: FabricNetwork, src: np.ndarray, dst: np.ndarray, single: bool,
                         merge: bool = False) -> tuple[np.ndarray, ...]:
    """Every pair's shortest paths as flows ``(message, weight, multiplicity, indptr,
    links)``, sorted by message, each message's paths by length and then in next-link order:
    a depth-first walk per pair (jitted), splitting the bytes evenly at every hop (or
    following the hash choice if ``single``; with ``merge``, twins as one flow)."""
    from ._paths import EXPANDED, TOO_LARGE, expand_paths  # Numba: when a fabric routes

    message, weight, mult, indptr, links, mixed, status = expand_paths(
        *path_kernel_args(net, src, dst, single, merge))
    if status == TOO_LARGE:
        raise RoutingError(
            f"{net.config.source}: the {src.size} messages of one step split over their "
            f"equal-cost paths into more than {MAX_PATH_LINKS} path links (~100 bytes each "
            f"in the flow engine); use 'routing: hash' (one path per message, as switches "
            f"hash flows), fewer NPUs, or the multi-dimensional form")
    if status != EXPANDED:
        raise RoutingError("routing did not converge (a cycle of zero-cost links?)")
    unreachable = np.bincount(message, minlength=src.size) == 0   # a pair to itself: 1 path
    if unreachable.any():
        i = int(np.nonzero(unreachable)[0][0])
        raise RoutingError(f"{net.config.source}: no path from {net.config.node_names[src[i]]} "
                           f"to {net.config.node_names[dst[i]]}")
    if mixed:  # shorter paths of a message first (stable: next-link order within a length)
        length = np.diff(indptr)
        order = np.lexsort((length, message))
        starts = indptr[:-1][order]
        message, weight, mult = message[order], weight[order], mult[order]
        length = length[order]
        links = links[gather_segments(starts, length)]
        indptr = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    return message, weight, mult, indptr, links

