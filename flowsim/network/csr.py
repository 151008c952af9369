"""Reductions over the segments of a CSR incidence (one segment per flow)."""

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
