"""Numba kernels of max-min fair sharing: the progressive-filling solver and the binary heap
it (and the event loop of :mod:`._kernels`) keeps on plain arrays.

Dtypes as in :mod:`._kernels`; nothing here validates (``maxmin.py`` and ``engine.py`` do).
"""

from __future__ import annotations

import numpy as np
from numba import njit


# ---------------------------------------------------------------- binary min-heap on arrays
@njit(cache=True)
def heap_push(keys, ids, tags, size, key, ident, tag):
    """Push ``(key, ident, tag)``; ties on ``key`` pop in ``ident`` order. Returns new size.

    Sifts a hole up instead of swapping entries (a third of the writes).
    """
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        pk = keys[parent]
        if pk < key or (pk == key and ids[parent] < ident):
            break
        keys[i] = pk
        ids[i] = ids[parent]
        tags[i] = tags[parent]
        i = parent
    keys[i] = key
    ids[i] = ident
    tags[i] = tag
    return size + 1


@njit(cache=True)
def heap_pop(keys, ids, tags, size):
    """Remove the top entry (read it first at index 0). Returns the new size."""
    size -= 1
    key = keys[size]
    ident = ids[size]
    tag = tags[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size:
            k0 = keys[child]
            k1 = keys[child + 1]
            if k1 < k0 or (k1 == k0 and ids[child + 1] < ids[child]):
                child += 1
        ck = keys[child]
        if key < ck or (key == ck and ident < ids[child]):
            break
        keys[i] = ck
        ids[i] = ids[child]
        tags[i] = tags[child]
        i = child
    keys[i] = key
    ids[i] = ident
    tags[i] = tag
    return size


# ---------------------------------------------------------------- max-min fair rates
@njit(cache=True)
def maxmin_active(capacity, indptr, links, mult, active, n_active, rates,
                  remaining_cap, unfrozen, link_start, link_fill, link_flows, touched,
                  frozen, heap_keys, heap_ids, heap_tags, reuse=False, n_counted=-1):
    """Max-min fair rates of the flows ``active[:n_active]`` by progressive filling; flow
    ``f`` counts as ``mult[f]`` flows of its rate (copies merged into one; ``mult`` empty:
    every flow counts once).

    The link with the smallest fair share ``remaining_cap / unfrozen`` saturates first; its
    unfrozen flows are frozen at that share and their rate is taken off every other link on
    their paths. Shares only grow as flows freeze, so every link sits in a min-heap once,
    keyed by a lower bound of its share: a popped link whose share has grown goes back with
    its new share; one whose share is its key is the next bottleneck.

    Writes ``rates[f]`` for every active ``f`` (``inf`` for a flow without links). Workspaces:
    ``remaining_cap, link_start, link_fill`` (float/int, size L), ``unfrozen`` (float,
    size L: the unfrozen copies, all zero on entry and on exit), ``touched`` (size L),
    ``link_flows`` (size >= incidences of the active flows), the heap arrays (size L: a link
    is in the heap at most once), ``frozen`` (uint8, size F).

    ``reuse`` (no copies only): keep the link -> flows lists (``link_start``,
    ``link_fill``, ``link_flows``) of an earlier call whose active flows include these;
    flows no longer active are skipped as frozen (a call leaves every flow it saw frozen).
    Building the lists is a scatter over every incidence, a third of a large solve. The
    rates are the same bits either way: the flows of one bottleneck all take its one share,
    so the order they are frozen in cannot change what is taken off any other link (with
    copies ``share * copies`` differs per flow, and the order would matter).

    ``n_counted >= 0`` (no copies only): ``unfrozen`` already holds each link's active flows
    and ``touched[:n_counted]`` the links holding any (the event loop keeps both as flows
    start and finish), so the count over every incidence is skipped; the links' order in
    ``touched`` does not matter (the heap orders ties by link).
    Returns the number of links touched.
    """
    single = mult.size == 0         # no flow stands for copies: counts are flows
    n_touched = 0
    if n_counted >= 0:
        n_touched = n_counted
        for i in range(n_active):
            frozen[active[i]] = 0
    for i in range(n_active if n_counted < 0 else 0):
        f = active[i]
        frozen[f] = 0
        if single:
            for e in range(indptr[f], indptr[f + 1]):
                link = links[e]
                if unfrozen[link] == 0:
                    touched[n_touched] = link
                    n_touched += 1
                unfrozen[link] += 1.0
        else:
            copies = mult[f]
            for e in range(indptr[f], indptr[f + 1]):
                link = links[e]
                if unfrozen[link] == 0:
                    touched[n_touched] = link
                    n_touched += 1
                    link_fill[link] = 0
                unfrozen[link] += copies
                link_fill[link] += 1
    if reuse:
        for i in range(n_active):
            f = active[i]
            if indptr[f] == indptr[f + 1]:
                rates[f] = np.inf
                frozen[f] = 1
    else:
        # link -> flows incidence over the touched links
        pos = 0
        for t in range(n_touched):
            link = touched[t]
            link_start[link] = pos
            pos += int(unfrozen[link]) if single else link_fill[link]
            link_fill[link] = 0
        for i in range(n_active):
            f = active[i]
            if indptr[f] == indptr[f + 1]:
                rates[f] = np.inf
                frozen[f] = 1
                continue
            for e in range(indptr[f], indptr[f + 1]):
                link = links[e]
                link_flows[link_start[link] + link_fill[link]] = f
                link_fill[link] += 1
    size = 0
    for t in range(n_touched):
        link = touched[t]
        remaining_cap[link] = capacity[link]
        size = heap_push(heap_keys, heap_ids, heap_tags, size,
                         capacity[link] / unfrozen[link], link, 0)
    while size > 0:
        link = heap_ids[0]
        key = heap_keys[0]
        size = heap_pop(heap_keys, heap_ids, heap_tags, size)
        if unfrozen[link] == 0:
            continue
        left = remaining_cap[link]
        if left < 0.0:
            left = 0.0
        share = left / unfrozen[link]
        if share > key:
            # the key was a lower bound (shares only grow as flows freeze): re-queue
            size = heap_push(heap_keys, heap_ids, heap_tags, size, share, link, 0)
            continue
        start = link_start[link]
        for k in range(start, start + link_fill[link]):
            f = link_flows[k]
            if frozen[f]:
                continue
            frozen[f] = 1
            rates[f] = share
            if single:
                for e in range(indptr[f], indptr[f + 1]):
                    other = links[e]
                    remaining_cap[other] -= share
                    unfrozen[other] -= 1.0
            else:
                copies = mult[f]
                for e in range(indptr[f], indptr[f + 1]):
                    other = links[e]
                    remaining_cap[other] -= share * copies
                    unfrozen[other] -= copies
    return n_touched
