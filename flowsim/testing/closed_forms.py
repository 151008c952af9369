"""Closed forms of the bytes a collective puts on the network, for conservation checks.

Every algorithm of one phase on a group of ``p`` ranks working on a buffer of ``D`` bytes
(the phase's ``D`` of :mod:`flowsim.collectives.base`) makes the group send

=====================  ===========================================  =====================
collective             algorithms                                   bytes sent by group
=====================  ===========================================  =====================
all-reduce             ring, direct, halvingDoubling, doubleBinary  ``2 (p-1) D``
reduce-scatter         ring, direct, halvingDoubling                ``(p-1) D``
all-gather             ring, direct, halvingDoubling                ``(p-1) D``
all-to-all             direct                                       ``(p-1) D``
all-to-all             ring (blocks forwarded hop by hop)           ``p (p-1) D / 2``
=====================  ===========================================  =====================

(every rank's share leaves it once per pass; an all-reduce is two passes). So ring all-reduce
sends ``2 (p-1)/p D`` per NPU. A multi-dimensional collective composes phases dimension by
dimension as :mod:`flowsim.system.phases` describes (``localBWAware``: reduce-scatter up, the
data shrinking by each dimension's size, all-reduce on the last, all-gather back down).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_ALGORITHMS = {
    "all_reduce": ("ring", "direct", "halvingDoubling", "doubleBinaryTree"),
    "reduce_scatter": ("ring", "direct", "halvingDoubling"),
    "all_gather": ("ring", "direct", "halvingDoubling"),
    "all_to_all": ("ring", "direct"),
}


def group_sent_bytes(collective: str, algorithm: str, p: int, data: float) -> float:
    """Bytes a group of ``p`` ranks sends in one phase on a ``data``-byte buffer (see the
    table of the module docstring)."""
    if algorithm not in _ALGORITHMS.get(collective, ()):
        raise ValueError(f"no closed form for {collective} with {algorithm}")
    if collective == "all_reduce":
        return 2.0 * (p - 1) * data
    if collective == "all_to_all" and algorithm == "ring":
        return p * (p - 1) * data / 2.0
    return (p - 1) * data


def closed_form_sent_bytes(npus_count: Sequence[int], collective: str, nbytes: float,
                           algorithms: Sequence[str] | None = None,
                           optimization: str = "localBWAware") -> np.ndarray:
    """Bytes all NPUs together send in every dimension during one collective.

    Parameters
    ----------
    npus_count : sequence of int
        NPUs per dimension (dimensions of size 1 carry nothing).
    collective : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"}
    nbytes : float
        The collective's size as :func:`flowsim.simulate_collective` takes it (for an
        all-gather, each NPU's input).
    algorithms : sequence of str, optional
        One per dimension (default ``ring`` everywhere); flat ``one*`` algorithms and
        doubleBinaryTree outside all-reduce phases have no closed form here.
    optimization : {"localBWAware", "baseline"}
        ``collective-optimization`` (all-reduce only).

    Returns
    -------
    ndarray of float64, shape (dims,)

    Raises
    ------
    ValueError
        For a combination without a closed form here.
    """
    sizes = [int(p) for p in npus_count]
    algorithms = list(algorithms or ["ring"] * len(sizes))
    npus = math.prod(sizes)
    involved = [d for d, p in enumerate(sizes) if p > 1]
    out = np.zeros(len(sizes))

    def phase(d: int, kind: str, data: float) -> None:
        groups = npus // sizes[d]
        out[d] += groups * group_sent_bytes(kind, algorithms[d], sizes[d], data)

    if not involved:
        return out
    if collective == "all_reduce" and optimization == "localBWAware":
        data = float(nbytes)
        for d in involved[:-1]:   # reduce-scatter up, then all-gather down on the same data
            phase(d, "reduce_scatter", data)
            phase(d, "all_gather", data)
            data /= sizes[d]
        phase(involved[-1], "all_reduce", data)
    elif collective in ("all_reduce", "all_to_all"):
        for d in involved:
            phase(d, collective, float(nbytes))
    elif collective == "reduce_scatter":
        data = float(nbytes)
        for d in involved:
            phase(d, collective, data)
            data /= sizes[d]
    elif collective == "all_gather":
        data = float(nbytes)
        for d in reversed(involved):
            data *= sizes[d]
            phase(d, collective, data)
    else:
        raise ValueError(f"no closed form for {collective}")
    return out
