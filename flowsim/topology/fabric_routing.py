"""A fabric's shortest-path routing tables, sized by the switches that reach NPUs, not by
NPUs x links.

Every shortest path into NPU ``t`` ends with one of ``t``'s in-links ``u -> t``; call the
nodes ``u`` that have a link into some NPU the *anchors* (a host's scale-up switch and its
leaves, or neighbouring NPUs on a torus). So the cost from node ``v`` to ``t`` is

    cost(v, t) = min over in-links (u -> t) of  dist(v, u) + cost(u -> t),

and a link ``v -> w`` starts a shortest path to ``t`` exactly when it starts a shortest path
to an anchor ``u`` that attains that minimum (or is the in-link itself, when ``v`` is ``u``).
The tables hold distances to the anchors and, per (anchor, node), the links that start a
shortest path to the anchor: anchors x nodes entries, where the dense form holds NPUs x links
(an 8,192-GPU rail fabric: 1,280 anchors x 9,488 nodes, against 8,192 x 49,152). The jitted
walk (:func:`flowsim.topology._paths.expand_paths`) takes the union at every hop; it gives the
same next links, in the same order, as the dense table (``flowsim.testing.
fabric_next_hops_reference``), up to ties within :data:`COST_RTOL`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: cost of one hop added to the latency when choosing shortest paths (ns)
HOP_COST = 1e-3
#: relative tolerance for "equal cost" paths
COST_RTOL = 1e-9


@dataclass(frozen=True)
class RoutingTables:
    """Distances to the anchors, next links toward them, and every NPU's in-links.

    Attributes
    ----------
    anchor_node : ndarray of int64, shape (A,)
        Node id of every anchor.
    dist : ndarray of float64, shape (nodes, A)
        ``dist[v, a]``: cheapest cost from node ``v`` to anchor ``a`` (inf: no path); a
        node's row is contiguous, as a walk reads it.
    hop_ptr, hop_links : ndarray of int64, int32
        CSR over ``v * A + a``: the links that start a shortest path from ``v`` to
        anchor ``a``, in ascending link id.
    entry_ptr : ndarray of int64, shape (npus + 1,)
        CSR over NPUs of their in-links (ascending link id):
    entry_anchor, entry_link : ndarray of int64
        the anchor index of the link's tail and the link id,
    entry_cost : ndarray of float64
        and the link's routing cost (latency + :data:`HOP_COST`).
    """

    anchor_node: np.ndarray
    dist: np.ndarray
    hop_ptr: np.ndarray
    hop_links: np.ndarray
    entry_ptr: np.ndarray
    entry_anchor: np.ndarray
    entry_link: np.ndarray
    entry_cost: np.ndarray

    def kernel_tables(self) -> tuple:
        """The tables as the path kernel takes them (with :data:`COST_RTOL` last)."""
        return (self.anchor_node, self.dist, self.hop_ptr, self.hop_links, self.entry_ptr,
                self.entry_anchor, self.entry_link, self.entry_cost, COST_RTOL)


#: anchors whose shortest paths are computed together (a block's distances are held twice)
_ANCHOR_BLOCK = 256


def routing_tables(link_src: np.ndarray, link_dst: np.ndarray, link_latency: np.ndarray,
                   npus: int, num_nodes: int) -> RoutingTables:
    """The routing tables of a fabric (NPUs are nodes ``0..npus-1``)."""
    from scipy.sparse.csgraph import shortest_path  # here: a run without fabrics skips it

    from ._paths import anchor_next_links  # Numba, as the walk

    link_cost = link_latency + HOP_COST
    into_npu = np.nonzero(link_dst < npus)[0]                 # ascending link id
    anchor_node, anchor_of_link = np.unique(link_src[into_npu], return_inverse=True)
    order = np.argsort(link_dst[into_npu], kind="stable")     # by NPU, then link id
    entry_link = into_npu[order]
    entry_ptr = np.zeros(npus + 1, np.int64)
    np.cumsum(np.bincount(link_dst[entry_link], minlength=npus), out=entry_ptr[1:])
    # distances *to* each anchor: shortest paths from it on the reversed graph; parallel
    # links between two nodes keep the cheapest
    reversed_graph = _min_duplicates(link_dst, link_src, link_cost, num_nodes)
    # node-major (a path walk reads one node's row), filled a block of anchors at a time: a
    # whole anchor-major result and its transpose would hold the table twice
    dist = np.empty((num_nodes, anchor_node.size))
    for first in range(0, anchor_node.size, _ANCHOR_BLOCK):
        block = anchor_node[first:first + _ANCHOR_BLOCK]
        dist[:, first:first + block.size] = shortest_path(
            reversed_graph, method="D", directed=True, indices=block).reshape(
                block.size, num_nodes).T
    hop_ptr, hop_links = anchor_next_links(dist, link_src, link_dst, link_cost, COST_RTOL)
    return RoutingTables(anchor_node.astype(np.int64), dist, hop_ptr, hop_links, entry_ptr,
                         anchor_of_link[order].astype(np.int64), entry_link.astype(np.int64),
                         link_cost[entry_link].astype(np.float64))


def _min_duplicates(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int):
    """Sparse matrix keeping the smallest value among duplicate entries."""
    from scipy.sparse import csr_matrix

    key = rows * n + cols
    order = np.lexsort((values, key))
    first = np.ones(order.size, bool)
    first[1:] = key[order][1:] != key[order][:-1]
    keep = order[first]
    return csr_matrix((values[keep], (rows[keep], cols[keep])), shape=(n, n))


def twin_link_groups(link_src: np.ndarray, link_dst: np.ndarray, bandwidth: np.ndarray,
                     latency: np.ndarray, npus: int,
                     num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Groups of links that a symmetry of the fabric maps onto each other: ``(rep, size)``,
    per link the lowest id of its group and the group's size.

    Two switches are *twins* when their links in and out go to the same neighbours with the
    same bandwidths and latencies (a pod's spines); swapping them, or two parallel links of
    equal parameters, maps the fabric onto itself and fixes every NPU. A group is every link
    from one twin class to another with the same bandwidth and latency. Under ECMP spraying
    the traffic is invariant under these swaps, and max-min rates are unique, so every link of
    a group carries the same load at every instant.
    """
    out_of: list[list[tuple]] = [[] for _ in range(num_nodes)]
    into: list[list[tuple]] = [[] for _ in range(num_nodes)]
    for a, b, bw, lat in zip(link_src.tolist(), link_dst.tolist(), bandwidth.tolist(),
                             latency.tolist()):
        out_of[a].append((b, bw, lat))
        into[b].append((a, bw, lat))
    classes: dict[tuple, int] = {}
    node_class = np.arange(num_nodes, dtype=np.int64)      # NPUs: a class each
    for v in range(npus, num_nodes):
        signature = (tuple(sorted(out_of[v])), tuple(sorted(into[v])))
        node_class[v] = classes.setdefault(signature, num_nodes + len(classes))
    groups: dict[tuple, int] = {}
    rep = np.empty(link_src.size, np.int64)
    for k, key in enumerate(zip(node_class[link_src].tolist(), node_class[link_dst].tolist(),
                                bandwidth.tolist(), latency.tolist())):
        rep[k] = groups.setdefault(key, k)
    size = np.bincount(rep, minlength=rep.size)[rep]
    return rep, size
