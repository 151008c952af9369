"""The contract every collective algorithm follows.

An algorithm turns one collective on one group of ``p`` NPUs (local ranks ``0..p-1``) into a
list of :class:`Step`. A step is a set of messages that all ranks send at once; the next step
of a rank needs what it received in this one. Message sizes are fractions of ``D``, the size
of the buffer the phase works on, so one step list serves every chunk size:

* reduce-scatter: each rank holds ``D`` bytes in, ``D/p`` (its own block) out;
* all-gather: each rank holds ``D/p`` in, ``D`` out;
* all-reduce and all-to-all: ``D`` in, ``D`` out;
* broadcast / reduce: the root's ``D`` bytes to everyone / everyone's ``D`` reduced at the root.

Blocks are fractional bytes (the fluid model), so a rank's share of ``D`` is exactly ``D/p``.
The system layer maps local ranks to NPUs, routes the messages and times the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._validate import choices_of

CollectiveType = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                         "broadcast", "reduce", "send_recv"]
COLLECTIVES: tuple[CollectiveType, ...] = choices_of(CollectiveType)


@dataclass(frozen=True)
class Step:
    """Messages of one step of a collective on a group, in local ranks.

    Attributes
    ----------
    src, dst : ndarray of int64, shape (m,)
        Local sender and receiver of every message.
    fraction : float
        Every message carries ``fraction * D`` bytes.
    reduce_fraction : float
        Bytes each receiver reduces after the step, as a fraction of ``D`` (0: no reduction).
        The local-reduction cost (``3 * bytes / local-mem-bw``) is charged once per step.
    """

    src: np.ndarray
    dst: np.ndarray
    fraction: float
    reduce_fraction: float = 0.0


@dataclass(frozen=True)
class Algorithm:
    """A registered collective algorithm.

    Attributes
    ----------
    name : str
        Name as written in a system config (``ring``, ``direct``, ...).
    steps : callable
        ``steps(collective, p, direction, root, variant) -> list[Step]``; ``direction`` is +1
        (clockwise, to rank+1) or -1 for ring-like algorithms, ``root`` the root rank of a
        broadcast or reduce, ``variant`` selects one of several shapes (the two trees of a
        double binary tree, alternating between chunks).
    supports : frozenset of str
        Collective types this algorithm implements.
    check_size : callable or None
        Raises ``ValueError`` with a reason when the algorithm cannot run on ``p`` ranks.
    """

    name: str
    steps: Callable[[str, int, int, int, int], list[Step]]
    supports: frozenset[str]
    check_size: Callable[[int], None] | None = None
    #: ranks progress independently (no barrier between steps), as ASTRA-sim runs trees
    per_npu_only: bool = False


ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm to the registry (one module per algorithm calls this)."""
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def ranks(p: int) -> np.ndarray:
    return np.arange(p, dtype=np.int64)
