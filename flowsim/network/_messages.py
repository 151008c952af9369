"""Numba kernel: per-message numbers of messages split over several paths (ECMP).

Plain contiguous arrays in; the caller (``flowsim.system.backends.make_template``) owns them.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def message_loads(indptr, links, weight, message, path_latency, bandwidth, n_messages):
    """Per message: its latency (longest of its paths), its ns per byte alone (the link it
    loads most relative to capacity sets the pace), and per link the ns of transmission per
    byte of message summed over the messages crossing it.

    Flows are sorted by ``message``; flow ``f`` carries ``weight[f]`` of its message's bytes
    over ``links[indptr[f]:indptr[f+1]]``.
    """
    n_links = bandwidth.size
    latency = np.zeros(n_messages)
    per_byte = np.zeros(n_messages)
    busy = np.zeros(n_links)
    load = np.zeros(n_links)
    touched = np.empty(n_links, np.int64)
    n_flows = indptr.size - 1
    f = 0
    while f < n_flows:
        m = message[f]
        n_touched = 0
        while f < n_flows and message[f] == m:
            if path_latency[f] > latency[m]:
                latency[m] = path_latency[f]
            for e in range(indptr[f], indptr[f + 1]):
                link = links[e]
                if load[link] == 0.0:
                    touched[n_touched] = link
                    n_touched += 1
                load[link] += weight[f]
            f += 1
        pace = 0.0
        for t in range(n_touched):
            link = touched[t]
            ratio = load[link] / bandwidth[link]
            if ratio > pace:
                pace = ratio
        per_byte[m] = pace
        for t in range(n_touched):
            link = touched[t]
            busy[link] += pace
            load[link] = 0.0
    return latency, per_byte, busy
