"""Per-message loads of a step's messages split over several paths (ECMP): two
implementations, bit-identical, chosen by size.

The jitted pass (:mod:`._messages`) is linear in the flows but costs a Numba import and a
cache load (about 0.4 s of a process) the first time; the vectorized one sorts (n log n) and
needs numpy only. Small steps, the whole of a small run, take the vectorized one unless Numba
is loaded anyway.
"""

from __future__ import annotations

import sys

import numpy as np
from numpy.typing import ArrayLike

#: Path incidences (flow, link entries) above which the jitted pass is worth its start-up.
JIT_ABOVE = 1 << 16


def message_loads(indptr: np.ndarray, links: np.ndarray, weight: np.ndarray,
                  message: np.ndarray, path_latency: np.ndarray, bandwidth: np.ndarray,
                  n_messages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per message its latency and ns per byte alone, per link its busy ns per byte of
    message (see :func:`message_loads_vectorized`); contiguous int64 / float64 arrays in."""
    if links.size > JIT_ABOVE or "numba" in sys.modules:
        from ._messages import message_loads as jitted

        return jitted(indptr, links, weight, message, path_latency, bandwidth, n_messages)
    return message_loads_vectorized(indptr, links, weight, message, path_latency, bandwidth,
                                    n_messages)


def message_loads_vectorized(indptr: ArrayLike, links: ArrayLike, weight: ArrayLike,
                             message: ArrayLike, path_latency: ArrayLike, bandwidth: ArrayLike,
                             n_messages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-message numbers of messages split over several paths, in numpy.

    Parameters
    ----------
    indptr, links : CSR path incidence of the F flows (link ids into ``bandwidth``).
    weight : ndarray, shape (F,)
        Share of its message's bytes flow ``f`` carries (> 0).
    message : ndarray of int, shape (F,)
        Message of every flow, non-decreasing.
    path_latency : ndarray, shape (F,)
        Latency of every flow's path (ns).
    bandwidth : ndarray, shape (L,)
        Link bandwidth (bytes/ns).
    n_messages : int

    Returns
    -------
    latency : ndarray, shape (n_messages,)
        The longest of the message's path latencies (0 for a message without flows).
    per_byte : ndarray, shape (n_messages,)
        ns per byte of the message when it is alone on the network: the link it loads most
        relative to its bandwidth sets the pace, ``max over links of load / bandwidth``,
        where a link's load is the sum of the weights of the message's flows crossing it.
    busy : ndarray, shape (L,)
        Per link, ns of transmission per byte of message: the sum of ``per_byte`` over the
        messages that cross the link (each message keeps the link busy for its whole
        transmission).
    """
    indptr = np.asarray(indptr, np.int64)
    links = np.asarray(links, np.int64)
    weight = np.asarray(weight, np.float64)
    message = np.asarray(message, np.int64)
    bandwidth = np.asarray(bandwidth, np.float64)
    n_links = bandwidth.size
    flow_of = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))   # per incidence
    latency = np.zeros(n_messages)
    np.maximum.at(latency, message, np.asarray(path_latency, np.float64))
    # load of every (message, link) pair that occurs
    pair = message[flow_of] * n_links + links
    pairs, which = np.unique(pair, return_inverse=True)
    load = np.bincount(which.ravel(), weights=weight[flow_of], minlength=pairs.size)
    pair_message, pair_link = np.divmod(pairs, n_links)
    per_byte = np.zeros(n_messages)
    np.maximum.at(per_byte, pair_message, load / bandwidth[pair_link])
    busy = np.bincount(pair_link, weights=per_byte[pair_message], minlength=n_links)
    return latency, per_byte, busy.astype(np.float64)
