"""Numba kernel: expand NPU pairs into their shortest paths over a fabric's routing tables
(ECMP).

Plain contiguous arrays in; :func:`flowsim.topology.fabric_network._shortest_path_flows`
validates and owns them, and :mod:`flowsim.topology.fabric_routing` says what the tables
hold.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: status codes of ``expand_paths``
EXPANDED = 0
NO_CONVERGENCE = 1
TOO_LARGE = 2
NEED_ROOM = 3      # internal: the output buffers are full; grow them and walk the pair again


@njit(cache=True)
def anchor_next_links(dist, link_src, link_dst, link_cost, rtol):
    """CSR over ``node * anchors + anchor`` of the links that start a shortest path from the
    node to the anchor (``dist[node, anchor]`` the cost), in ascending link id: a link
    ``v -> w`` qualifies when ``dist[w, a] + cost`` equals ``dist[v, a]`` within ``rtol``."""
    num_nodes, anchors = dist.shape
    ptr = np.zeros(num_nodes * anchors + 1, np.int64)
    for fill in range(2):
        if fill:
            for k in range(ptr.size - 1):
                ptr[k + 1] += ptr[k]
            links = np.empty(ptr[-1], np.int32)
            pos = ptr[:-1].copy()
        else:
            links = np.empty(0, np.int32)
            pos = ptr[:0]
        for link in range(link_src.size):       # ascending: each slot's links in order
            v = link_src[link]
            w = link_dst[link]
            for a in range(anchors):
                here = dist[v, a]
                there = dist[w, a] + link_cost[link]
                if not (there < np.inf and abs(there - here) <= rtol * max(here, 1.0)):
                    continue
                slot = v * anchors + a
                if fill:
                    links[pos[slot]] = link
                    pos[slot] += 1
                else:
                    ptr[slot + 1] += 1
    return ptr, links


@njit(cache=True)
def _add_choice(out, n, link):
    """Insert ``link`` into the ascending ``out[:n]`` unless present; returns the new n."""
    if n == 0 or out[n - 1] < link:       # the common case: lists arrive in order
        out[n] = link
        return n + 1
    i = n - 1
    while i >= 0 and out[i] > link:
        i -= 1
    if i >= 0 and out[i] == link:
        return n
    for k in range(n, i + 1, -1):
        out[k] = out[k - 1]
    out[i + 1] = link
    return n + 1


@njit(cache=True)
def next_links(v, t, anchor_node, dist, hop_ptr, hop_links, entry_ptr, entry_anchor,
               entry_link, entry_cost, rtol, out):
    """The links that start a shortest path from node ``v`` to NPU ``t`` (``v != t``),
    ascending, into ``out``; returns their count (0: no path).

    The cost to ``t`` is the cheapest of its in-links ``u -> t`` plus the distance to ``u``;
    the next links are the union, over the in-links that attain it, of the in-link itself
    (when ``v`` is ``u``) or the next links toward ``u``.
    """
    anchors = dist.shape[1]
    best = np.inf
    for e in range(entry_ptr[t], entry_ptr[t + 1]):
        c = dist[v, entry_anchor[e]] + entry_cost[e]
        if c < best:
            best = c
    if best == np.inf:
        return 0
    tol = rtol * max(best, 1.0)
    n = 0
    for e in range(entry_ptr[t], entry_ptr[t + 1]):
        a = entry_anchor[e]
        if abs(dist[v, a] + entry_cost[e] - best) > tol:
            continue
        if anchor_node[a] == v:
            n = _add_choice(out, n, entry_link[e])
        else:
            slot = v * anchors + a
            for k in range(hop_ptr[slot], hop_ptr[slot + 1]):
                n = _add_choice(out, n, hop_links[k])
    return n


@njit(cache=True)
def _group_choices(row, count, link_rep, members):
    """Keep the first of the ``count`` links in ``row`` of every twin group (same
    ``link_rep``), in order, with its group's number of links in ``members``; returns the
    number of groups."""
    n = 0
    for i in range(count):
        link = row[i]
        found = -1
        for j in range(n):
            if link_rep[row[j]] == link_rep[link]:
                found = j
                break
        if found >= 0:
            members[found] += 1
        else:
            row[n] = link
            members[n] = 1
            n += 1
    return n


@njit(cache=True)
def _walk(tables, link_dst, link_rep, merge, s, d, single, hkey, max_depth, flow_base,
          link_base, out_length, out_weight, out_mult, out_links, path, choices, members,
          n_choices, totals, next_pos, weights, mults):
    """Depth-first walk of the shortest paths from ``s`` to ``d`` in next-link order.

    Splits the bytes evenly at every hop (or, if ``single``, follows the candidate
    ``hkey % count``). With ``merge``, the next links of one twin group are one choice: the
    walk follows the first and the path counts the others as copies (its multiplicity), and
    a path's links are its groups' representatives. Writes each path's length, weight,
    multiplicity and links at ``flow_base`` / ``link_base``, or stops with ``NEED_ROOM`` when
    the buffers are full. Returns (paths, links, mixed lengths, status).
    """
    anchor_node, dist, hop_ptr, hop_links, entry_ptr, entry_anchor, entry_link, entry_cost, \
        rtol = tables
    if s == d:
        if flow_base >= out_length.size:
            return 0, 0, False, NEED_ROOM
        out_length[flow_base] = 0
        out_weight[flow_base] = 1.0
        out_mult[flow_base] = 1.0
        return 1, 0, False, EXPANDED
    n_paths = 0
    n_links = 0
    first_length = -1
    mixed = False
    depth = 0
    node = s
    weights[0] = 1.0
    mults[0] = 1.0
    while depth >= 0:
        if node >= 0:      # just arrived at ``node``: list its choices
            count = next_links(node, d, anchor_node, dist, hop_ptr, hop_links, entry_ptr,
                               entry_anchor, entry_link, entry_cost, rtol, choices[depth])
            totals[depth] = count
            if merge:
                count = _group_choices(choices[depth], count, link_rep, members[depth])
            n_choices[depth] = count
            next_pos[depth] = hkey % count if single and count > 0 else 0
            node = -1
        count = n_choices[depth]
        pos = next_pos[depth]
        last = (hkey % count + 1 if count > 0 else 0) if single else count
        if pos >= last:
            depth -= 1
            continue
        next_pos[depth] = pos + 1
        link = choices[depth, pos]
        path[depth] = link_rep[link] if merge else link
        weight = weights[depth] if single else weights[depth] / totals[depth]
        mult = mults[depth] * members[depth, pos] if merge else 1.0
        head = link_dst[link]
        if head == d:
            length = depth + 1
            if (flow_base + n_paths >= out_length.size
                    or link_base + n_links + length > out_links.size):
                return n_paths, n_links, mixed, NEED_ROOM
            out_length[flow_base + n_paths] = length
            out_weight[flow_base + n_paths] = weight
            out_mult[flow_base + n_paths] = mult
            for k in range(length):
                out_links[link_base + n_links + k] = path[k]
            if first_length < 0:
                first_length = length
            elif length != first_length:
                mixed = True
            n_paths += 1
            n_links += length
            continue
        if depth + 1 >= max_depth:
            return n_paths, n_links, mixed, NO_CONVERGENCE
        depth += 1
        weights[depth] = weight
        mults[depth] = mult
        node = head
    return n_paths, n_links, mixed, EXPANDED


@njit(cache=True)
def _grown(a, size, used):
    """``a`` in a new buffer of ``size`` entries, its first ``used`` kept."""
    out = np.empty(size, a.dtype)
    out[:used] = a[:used]
    return out


@njit(cache=True)
def expand_paths(tables, link_dst, link_rep, merge, max_degree, src, dst, single, hash_key,
                 max_depth, max_links):
    """Every pair's shortest paths as flows: (message, weight, multiplicity, indptr, links,
    mixed, status).

    ``tables`` is the tuple ``(anchor_node, dist, hop_ptr, hop_links, entry_ptr,
    entry_anchor, entry_link, entry_cost, rtol)`` of a fabric's routing tables and
    ``max_degree`` the most links out of one node; ``link_rep`` the representative of every
    link's twin group, used when ``merge``. Flows come out grouped by pair, each pair's paths
    in depth-first next-link order; ``mixed`` is True if some pair has paths of different
    lengths. One walk per pair into buffers grown by doubling (the tables are read once);
    stops with ``TOO_LARGE`` once the paths hold more than ``max_links`` links in all.
    """
    n = src.size
    path = np.empty(max_depth, np.int64)
    width = max(max_degree, 1)
    choices = np.empty((max_depth, width), np.int64)
    members = np.ones((max_depth, width), np.int64)
    n_choices = np.empty(max_depth, np.int64)
    totals = np.empty(max_depth, np.int64)
    next_pos = np.empty(max_depth, np.int64)
    weights = np.empty(max_depth, np.float64)
    mults = np.empty(max_depth, np.float64)
    room = max(n, 16)
    message = np.empty(room, np.int64)
    length = np.empty(room, np.int64)
    weight = np.empty(room, np.float64)
    mult = np.empty(room, np.float64)
    links = np.empty(4 * room, np.int32)
    n_flows = 0
    n_links = 0
    mixed = False
    for i in range(n):
        while True:
            p, m, mix, status = _walk(tables, link_dst, link_rep, merge, src[i], dst[i],
                                      single, hash_key[i], max_depth, n_flows, n_links,
                                      length, weight, mult, links, path, choices, members,
                                      n_choices, totals, next_pos, weights, mults)
            if status != NEED_ROOM:
                break
            room = 2 * message.size
            message = _grown(message, room, n_flows)
            length = _grown(length, room, n_flows)
            weight = _grown(weight, room, n_flows)
            mult = _grown(mult, room, n_flows)
            links = _grown(links, max(2 * links.size, n_links + max_depth), n_links)
        if status != EXPANDED:
            return (message[:0], weight[:0], mult[:0], message[:0], links[:0], mixed, status)
        message[n_flows:n_flows + p] = i
        n_flows += p
        n_links += m
        mixed = mixed or mix
        if n_links > max_links:
            return (message[:0], weight[:0], mult[:0], message[:0], links[:0], mixed,
                    TOO_LARGE)
    indptr = np.zeros(n_flows + 1, np.int64)
    for f in range(n_flows):
        indptr[f + 1] = indptr[f] + length[f]
    return (message[:n_flows].copy(), weight[:n_flows].copy(), mult[:n_flows].copy(), indptr,
            links[:n_links].copy(), mixed, EXPANDED)
