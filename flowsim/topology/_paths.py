"""Numba kernel: expand NPU pairs into their shortest paths over a next-hop table (ECMP).

Plain contiguous arrays in; :func:`flowsim.topology.fabric_network._shortest_path_flows`
validates and owns them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: status codes of ``expand_paths``
EXPANDED = 0
NO_CONVERGENCE = 1


@njit(cache=True)
def _walk(hop_ptr, hop_links, link_dst, npus, s, d, single, hkey, max_depth, fill,
          flow_base, link_base, out_length, out_weight, out_links, path, nodes, next_pos,
          weights):
    """Depth-first walk of the shortest paths from ``s`` to ``d`` in next-link order.

    Splits the bytes evenly at every hop (or, if ``single``, follows the candidate
    ``hkey % count``). With ``fill`` writes each path's length, weight and links at
    ``flow_base`` / ``link_base``. Returns (paths, links, mixed lengths, status).
    """
    if s == d:
        if fill:
            out_length[flow_base] = 0
            out_weight[flow_base] = 1.0
        return 1, 0, False, EXPANDED
    n_paths = 0
    n_links = 0
    first_length = -1
    mixed = False
    depth = 0
    nodes[0] = s
    weights[0] = 1.0
    slot = s * npus + d
    count = hop_ptr[slot + 1] - hop_ptr[slot]
    next_pos[0] = hkey % count if single and count > 0 else 0
    while depth >= 0:
        slot = nodes[depth] * npus + d
        lo = hop_ptr[slot]
        count = hop_ptr[slot + 1] - lo
        pos = next_pos[depth]
        last = (hkey % count + 1 if count > 0 else 0) if single else count
        if pos >= last:
            depth -= 1
            continue
        next_pos[depth] = pos + 1
        link = hop_links[lo + pos]
        path[depth] = link
        weight = weights[depth] if single else weights[depth] / count
        head = link_dst[link]
        if head == d:
            length = depth + 1
            if fill:
                out_length[flow_base + n_paths] = length
                out_weight[flow_base + n_paths] = weight
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
        nodes[depth] = head
        weights[depth] = weight
        slot = head * npus + d
        count = hop_ptr[slot + 1] - hop_ptr[slot]
        next_pos[depth] = hkey % count if single and count > 0 else 0
    return n_paths, n_links, mixed, EXPANDED


@njit(cache=True)
def expand_paths(hop_ptr, hop_links, link_dst, npus, src, dst, single, hash_key, max_depth):
    """Every pair's shortest paths as flows: (message, weight, indptr, links, mixed, status).

    Flows come out grouped by pair, each pair's paths in depth-first next-link order;
    ``mixed`` is True if some pair has paths of different lengths.
    """
    n = src.size
    path = np.empty(max_depth, np.int64)
    nodes = np.empty(max_depth, np.int64)
    next_pos = np.empty(max_depth, np.int64)
    weights = np.empty(max_depth, np.float64)
    dummy_int = np.empty(0, np.int64)
    dummy_float = np.empty(0, np.float64)
    dummy_links = np.empty(0, np.int32)
    paths_of = np.zeros(n + 1, np.int64)
    links_of = np.zeros(n + 1, np.int64)
    mixed = False
    for i in range(n):
        p, m, mix, status = _walk(hop_ptr, hop_links, link_dst, npus, src[i], dst[i], single,
                                  hash_key[i], max_depth, False, 0, 0, dummy_int, dummy_float,
                                  dummy_links, path, nodes, next_pos, weights)
        if status != EXPANDED:
            return (dummy_int, dummy_float, dummy_int, dummy_links, mixed, status)
        paths_of[i + 1] = paths_of[i] + p
        links_of[i + 1] = links_of[i] + m
        mixed = mixed or mix
    n_flows = paths_of[n]
    message = np.empty(n_flows, np.int64)
    length = np.empty(n_flows, np.int64)
    weight = np.empty(n_flows, np.float64)
    links = np.empty(links_of[n], np.int32)
    for i in range(n):
        _walk(hop_ptr, hop_links, link_dst, npus, src[i], dst[i], single, hash_key[i],
              max_depth, True, paths_of[i], links_of[i], length, weight, links, path, nodes,
              next_pos, weights)
        for f in range(paths_of[i], paths_of[i + 1]):
            message[f] = i
    indptr = np.zeros(n_flows + 1, np.int64)
    for f in range(n_flows):
        indptr[f + 1] = indptr[f] + length[f]
    return message, weight, indptr, links, mixed, EXPANDED
