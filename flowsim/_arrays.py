"""Array helpers shared by every layer."""

from __future__ import annotations

import numpy as np


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
