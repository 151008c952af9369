"""Double binary tree all-reduce (ASTRA-sim ``doubleBinaryTree``; NCCL's trees).

Two trees over ``p = 2^d`` ranks, used by alternate chunks. The *max* tree has root ``p-1``
whose single child is the top (rank ``p/2-1``) of a complete in-order binary tree over
``0..p-2``; the *min* tree is the same shifted by one rank (root 0, top ``p/2``). Leaves are
the even ranks in one tree and the odd ranks in the other.

Every message carries the whole buffer (no pipelining inside the tree): data is reduced up
the tree level by level (leaves first, ``d`` steps) and broadcast back down (``d`` steps).
Each node reduces what it receives on the way up and, as ASTRA-sim charges it, again on the
way down. A node starts its next step as soon as it has received from the previous step, so
the trees run with per-NPU synchronisation (the system layer forces it).
"""

from __future__ import annotations

import numpy as np

from .base import Algorithm, Step, register


def _check_power_of_two(p: int) -> None:
    if p < 2 or p & (p - 1):
        raise ValueError(f"doubleBinaryTree needs a power-of-two group size, got {p} NPUs "
                         f"(use ring or direct on this dimension)")


def tree_parents(p: int, variant: int = 0) -> np.ndarray:
    """Parent of every rank (-1 for the root); ``variant`` 0 is the max tree, 1 the min tree."""
    _check_power_of_two(p)
    parent = np.full(p, -1, dtype=np.int64)
    # complete in-order binary tree over ranks 0..p-2: node at in-order position i with
    # lowest set bit 2^j has children i -/+ 2^(j-1)
    for i in range(1, p):
        low = i & -i
        if low > 1:
            parent[i - 1 - low // 2] = i - 1
            parent[i - 1 + low // 2] = i - 1
    top = p // 2 - 1
    parent[top] = p - 1
    if variant % 2:
        shifted = np.full(p, -1, dtype=np.int64)
        for child in range(p):
            if parent[child] >= 0:
                shifted[(child + 1) % p] = (parent[child] + 1) % p
        parent = shifted
    return parent


def _levels(parent: np.ndarray) -> np.ndarray:
    level = np.zeros(parent.size, dtype=np.int64)
    for node in range(parent.size):
        up = parent[node]
        while up >= 0:
            level[node] += 1
            up = parent[up]
    return level


def double_binary_tree_steps(collective: str, p: int, direction: int = 1, root: int = 0,
                             variant: int = 0) -> list[Step]:
    """Steps of a tree all-reduce on ``p = 2^d`` ranks (tree ``variant`` 0 or 1).

    Broadcast and reduce use one tree re-rooted at ``root`` (variant ignored).
    """
    parent = tree_parents(p, variant)
    if collective in ("broadcast", "reduce"):
        parent = tree_parents(p, 0)
        shift = root - (p - 1)
        parent = np.where(parent >= 0, (parent + shift) % p, -1)[(np.arange(p) - shift) % p]
    level = _levels(parent)
    depth = int(level.max())
    up, down = [], []
    for lev in range(depth, 0, -1):
        children = np.nonzero(level == lev)[0]
        up.append(Step(children, parent[children], 1.0, 1.0))
    for lev in range(1, depth + 1):
        children = np.nonzero(level == lev)[0]
        # nodes reduce again on the way down, except the leaves, which only receive
        reduce = 1.0 if lev < depth else 0.0
        down.append(Step(parent[children], children, 1.0, reduce))
    if collective == "broadcast":
        return [Step(s.src, s.dst, 1.0) for s in down]
    if collective == "reduce":
        return up
    return up + down


DOUBLE_BINARY_TREE = register(Algorithm(
    name="doubleBinaryTree", steps=double_binary_tree_steps,
    supports=frozenset({"all_reduce", "broadcast", "reduce"}),
    check_size=_check_power_of_two, per_npu_only=True))
