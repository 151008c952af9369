"""Array helpers shared by every layer: reductions over the segments of a
CSR incidence (one segment per flow) and index arithmetic on segments.

They sit below both layers (the topology routes with them, the network models time flows
with them), so neither layer has to import the other for them.
"""

from __future__ import annotations

import numpy as np


def segment_sum(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Sum of ``values[indptr[i]:indptr[i+1]]`` for every ``i`` (0 for empty segments)."""
    csum = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    return csum[indptr[1:]] - csum[indptr[:-1]]


def segment_min(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Minimum over every segment; ``inf`` for empty segments."""
    out = np.full(indptr.size - 1, np.inf)
    nonempty = indptr[1:] > indptr[:-1]
    if nonempty.any():
        out[nonempty] = np.minimum.reduceat(values, indptr[:-1][nonempty])
    return out


def segment_offsets(counts: np.ndarray) -> np.ndarray:
    """``0..counts[i]-1`` for every segment, concatenated: ``[0,1,2, 0, 0,1]`` for ``[3,1,2]``."""
    counts = np.asarray(counts, np.int64)
    return np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)


def gather_segments(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] .. starts[i]+counts[i]-1`` for every segment, concatenated."""
    return np.repeat(starts, counts) + segment_offsets(counts)


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals ``[starts[i], ends[i])``."""
    if starts.size == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # a new disjoint block begins where an interval starts after everything before it ended
    new_block = np.concatenate([[True], s[1:] > reach[:-1]])
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_start.size)
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


def sparse_link_sums(links: np.ndarray, weights: np.ndarray, num_links: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The links ``links`` names (ascending), how often each appears, and the sum of
    ``weights`` over its appearances: ``np.bincount`` restricted to its support.

    Counting over every link costs ``num_links`` per call, sorting the entries
    ``links.size log links.size``; a phase of one simulated group on a 131,072-NPU network
    is a few thousand entries against ~800,000 links, so the cheaper one is taken. Both give
    the same sums bit for bit: each bin adds its weights in entry order either way.
    """
    if links.size * 16 < num_links:
        ids, inverse, counts = np.unique(links, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse.ravel(), weights=weights, minlength=ids.size)
        return ids.astype(np.int64), counts, sums
    counts = np.bincount(links, minlength=num_links)
    ids = np.flatnonzero(counts)
    sums = np.bincount(links, weights=weights, minlength=num_links)[ids]
    return ids, counts[ids], sums
