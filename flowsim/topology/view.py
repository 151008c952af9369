"""A network seen through finer logical dimensions: parallel groups inside one physical one.

A cluster of 2,048 nodes of 8 GPUs is two physical dimensions, ``[8, 2048]`` (NVLink inside a
node, the scale-out network across nodes), but a training job splits the 2,048 nodes into
groups of several kinds: 128-way data parallelism inside 16 pipeline stages, say. A
:class:`LogicalView` factors each physical dimension into consecutive *pieces*
(``[8, 2048] -> [8, 128, 16]``; mixed radix, the first piece fastest, so NPU ids do not
change), and collectives run over pieces as over dimensions, while every message is still
routed on the physical network. It is the same idea as a fabric's ``logical_dims`` and as
ASTRA-sim 1.0's split of a dimension for a model-parallel group.

What the pieces of one physical dimension share is the physical dimension's links: a group of
a piece uses the links its members would use in the whole dimension (in a Switch dimension,
each member's own link to the switch). Pieces of a Switch or FullyConnected dimension are
therefore exact replicas of each other (their groups use disjoint links of equal bandwidth);
pieces of a Ring are not (a strided group's ring passes other NPUs' links).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np

from ..errors import ConfigError, RoutingError
from .grid import LogicalGrid
from .network_config import NetworkConfig

#: physical dimension kinds whose pieces use disjoint links of equal bandwidth
_REPLICABLE_PIECES = ("Switch", "FullyConnected")


def factor_dims(sizes: tuple[int, ...], groups: tuple[int, ...]
                ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...]]:
    """Pieces ``(physical dim, size)`` that cut ``sizes`` at every boundary of ``groups``, and
    the pieces (logical dims) of each group.

    ``groups`` are consecutive factors of the NPU count (innermost first, e.g. the degrees of
    tensor, data and pipeline parallelism); the result splits the physical dimensions
    wherever a group ends inside one, so every group is a run of whole pieces (a group of 1
    has none).

    Raises
    ------
    ConfigError
        The groups do not multiply to the NPU count, or a group cuts a dimension at a point
        that does not divide it.
    """
    if int(np.prod(groups)) != int(np.prod(sizes)):
        raise ConfigError(f"groups of sizes {list(groups)} multiply to {int(np.prod(groups))}, "
                          f"not to the {int(np.prod(sizes))} NPUs of dims {list(sizes)}")
    pieces: list[tuple[int, int]] = []
    owned: list[tuple[int, ...]] = []
    d, left = 0, sizes[0]          # physical dim being cut, its part not yet taken
    for g in groups:
        first = len(pieces)
        need = g
        while need > 1:
            while left == 1:
                d, left = d + 1, sizes[d + 1]
            take = min(need, left)
            if need % take or left % take:
                raise ConfigError(f"a group of {g} NPUs cuts network dim {d} (size "
                                  f"{sizes[d]}) where it does not divide it: no whole "
                                  f"pieces of dims {list(sizes)} make groups {list(groups)}")
            pieces.append((d, take))
            need //= take
            left //= take
        owned.append(tuple(range(first, len(pieces))))
    return tuple(pieces), tuple(owned)


class LogicalView(LogicalGrid):
    """``base`` with its dimensions factored into the pieces ``pieces`` (see the module
    docstring); the same interface as the networks themselves.

    Parameters
    ----------
    base : Network or FabricNetwork
    pieces : tuple of (int, int)
        ``(dimension of base, size)`` for every logical dimension, in order; the pieces of
        each base dimension are consecutive and multiply to its size.
    """

    def __init__(self, base, pieces: tuple[tuple[int, int], ...]) -> None:
        self.base = base
        self.pieces = tuple((int(d), int(s)) for d, s in pieces)
        for d, size in enumerate(base.dims):
            mine = [s for p, s in self.pieces if p == d]
            if int(np.prod(mine)) != size:
                raise ConfigError(f"pieces {list(self.pieces)} do not factor dim {d} of size "
                                  f"{size}")
        parents = [p for p, _ in self.pieces]
        if parents != sorted(parents):
            raise ConfigError(f"pieces {list(self.pieces)} must keep the dims' order")
        self._adopt(base, tuple(s for _, s in self.pieces))

    def _adopt(self, base, dims: tuple[int, ...]) -> None:
        """Take the base's NPUs and links, seen with the logical ``dims``."""
        self.base = base
        self.npus = base.npus
        self.dims = dims
        self.link_src, self.link_dst = base.link_src, base.link_dst
        self.link_bandwidth, self.link_latency = base.link_bandwidth, base.link_latency
        self.num_switches = getattr(base, "num_switches", 0)

    @property
    def parents(self) -> tuple[int, ...]:
        """The base dimension of every logical dimension."""
        return tuple(p for p, _ in self.pieces)

    def on(self, base) -> LogicalView:
        """This view of ``base``, a network of the same dimensions as this view's base (a
        workload built for one network, run on another of its shape: other bandwidths,
        latencies, devices; the caller checks the shape)."""
        return LogicalView(base, self.pieces)

    @cached_property
    def split(self) -> tuple[bool, ...]:
        """Per logical dimension: whether its base dimension is cut into several pieces."""
        counts = np.bincount(self.parents, minlength=self.base.ndims)
        return tuple(bool(counts[p] > 1) for p in self.parents)

    @property
    def num_nodes(self) -> int:
        return self.base.num_nodes

    @property
    def num_links(self) -> int:
        return self.base.num_links

    @cached_property
    def link_dim(self) -> np.ndarray:
        """Logical dimension of every link: that of its base dimension when it is whole, -1
        when the base dimension is split (its links serve several pieces) or unknown."""
        mapping = np.full(self.base.ndims + 1, -1, np.int64)
        for d, (parent, _) in enumerate(self.pieces):
            if not self.split[d]:
                mapping[parent] = d
        base_dim = self.base.link_dim
        return np.where(base_dim >= 0, mapping[base_dim], -1)

    @cached_property
    def replicable(self) -> bool:
        kinds = self.base.config.topology
        return bool(self.base.replicable) and all(
            kinds[p] in _REPLICABLE_PIECES for p, cut in zip(self.parents, self.split) if cut)

    @cached_property
    def config(self):
        """The base config with one entry per logical dimension (for results' coordinates)."""
        cfg = self.base.config
        if not isinstance(cfg, NetworkConfig):   # a fabric: its logical dims are the pieces
            return replace(cfg, logical_dims=self.dims)
        pick = self.parents
        return NetworkConfig(topology=tuple(cfg.topology[p] for p in pick),
                             npus_count=self.dims,
                             bandwidth_gbps=tuple(cfg.bandwidth_gbps[p] for p in pick),
                             latency_ns=tuple(cfg.latency_ns[p] for p in pick),
                             in_network_reduction=tuple(
                                 cfg.in_network_reduction[p] and not cut
                                 for p, cut in zip(pick, self.split)),
                             device=cfg.device, system=cfg.system, source=cfg.source)

    # ------------------------------------------------------------------ routing (the base's)
    def routes(self, src: np.ndarray, dst: np.ndarray, *, lowest_dim_only: bool = False):
        return self.base.routes(src, dst, lowest_dim_only=lowest_dim_only)

    def routes_multipath(self, src: np.ndarray, dst: np.ndarray, *,
                         lowest_dim_only: bool = False):
        return self.base.routes_multipath(src, dst, lowest_dim_only=lowest_dim_only)

    def routes_merged(self, src: np.ndarray, dst: np.ndarray, *, lowest_dim_only: bool = False):
        return self.base.routes_merged(src, dst, lowest_dim_only=lowest_dim_only)

    @property
    def merges_twins(self) -> bool:  # type: ignore[override]  # the base's
        return bool(self.base.merges_twins)

    @property
    def engine_capacity(self) -> np.ndarray:
        return self.base.engine_capacity

    def spread_links(self, link_bytes: np.ndarray,
                     link_busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.base.spread_links(link_bytes, link_busy)

    def switch_links(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Up- and downlinks of a Switch dimension that is whole in this view."""
        if self.split[dim]:
            raise RoutingError(f"logical dim {dim} is a piece of network dim "
                               f"{self.parents[dim]}: no in-network reduction on part of a "
                               f"switch")
        return self.base.switch_links(self.parents[dim])

    def tile_first_instance(self, per_link: np.ndarray) -> np.ndarray:
        """As the base network's, when no dimension is split (per-link results of replicated
        groups of a piece cannot be tiled by instances)."""
        if any(self.split):
            raise RoutingError("per-link results of groups simulated once for all their "
                               "replicas are not available when a dimension is split")
        return self.base.tile_first_instance(per_link)


def base_dims(network, dim: int) -> tuple[int, ...]:
    """The dimensions of the network under ``network`` along which the members of a group of
    logical dimension ``dim`` differ: the dimension itself on a network seen as it is, its
    parent in a :class:`LogicalView`, the ones it spans in a :class:`StraddlingView`."""
    if isinstance(network, StraddlingView):
        return tuple(network.touched[dim])
    if isinstance(network, LogicalView):
        return (network.parents[dim],)
    return (dim,)


def touched_dims(base, dims: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """For each logical dimension of sizes ``dims`` (mixed radix over the NPU ids, the first
    fastest), the dimensions of ``base`` along which its groups' members differ.

    Consecutive members are compared: a base coordinate that never changes between neighbours
    is shared by the whole group."""
    ids = np.arange(base.npus, dtype=np.int64)
    out = []
    stride = 1
    for size in dims:
        inner = ids[(ids // stride) % size < size - 1]   # members with a next member
        moved = base.coords(inner) != base.coords(inner + stride)
        out.append(tuple(int(d) for d in np.flatnonzero(moved.any(axis=0))))
        stride *= size
    return tuple(out)


class StraddlingView(LogicalView):
    """``base`` seen with logical dimensions that do not factor its dimensions: a group may
    hold part of one dimension and part of the next (4 GPUs of one node and 2 of the next
    one, as Megatron-LM lays out tensor 2 x data 6 x pipeline 2 ranks on three 8-GPU nodes).

    NPU ids are unchanged and every message is routed on ``base``, so both models price the
    real paths (the analytical model by their latency and bottleneck, the flow model by
    sharing their links). What is lost is symmetry: groups of such a dimension are not
    replicas of each other (their members sit differently across the base dimensions), so
    every group is simulated (:attr:`replicable` is False). Each logical dimension is
    described by the outermost base dimension it touches (its :attr:`parents`: per-dimension
    algorithm lists and the results' coordinates), and its links are counted for it only
    when no other logical dimension uses them.

    Parameters
    ----------
    base : Network or FabricNetwork
    dims : tuple of int
        Sizes of the logical dimensions (consecutive factors of the NPU count, first
        fastest).
    """

    def __init__(self, base, dims: tuple[int, ...]) -> None:  # noqa: D107  (class docstring)
        if int(np.prod(dims)) != base.npus:
            raise ConfigError(f"logical dims {list(dims)} do not multiply to the {base.npus} "
                              f"NPUs of the network")
        dims = tuple(int(s) for s in dims)
        self.touched = touched_dims(base, dims)
        # a dimension of size 1 touches nothing: it sits with the base dimension before it
        parents, last = [], 0
        for touched in self.touched:
            last = max(touched) if touched else last
            parents.append(last)
        self.pieces = tuple(zip(parents, dims))
        self._adopt(base, dims)

    def on(self, base) -> StraddlingView:
        return StraddlingView(base, self.dims)

    @cached_property
    def split(self) -> tuple[bool, ...]:
        """Per logical dimension: whether it shares a base dimension's links with another
        logical dimension, or spans several base dimensions."""
        users = np.zeros(self.base.ndims, np.int64)
        for touched in self.touched:
            users[list(touched)] += 1
        return tuple(len(t) != 1 or bool(users[t[0]] > 1) for t in self.touched)

    @property
    def replicable(self) -> bool:
        return False


def straddling_view(base, groups: tuple[int, ...]
                    ) -> tuple[StraddlingView, tuple[tuple[int, ...], ...]]:
    """``base`` seen with one logical dimension per group of more than one NPU (see
    :class:`StraddlingView`), and the logical dims of each group (none for a group of 1)."""
    owned: list[tuple[int, ...]] = []
    dims: list[int] = []
    for g in groups:
        owned.append((len(dims),) if g > 1 else ())
        dims.extend([int(g)] if g > 1 else [])
    return StraddlingView(base, tuple(dims)), tuple(owned)


def logical_view(base, groups: tuple[int, ...]) -> tuple[object, tuple[tuple[int, ...], ...]]:
    """``base`` seen with the logical dimensions that make ``groups`` whole, and the logical
    dims of each group: the base itself when its dimensions already do, a
    :class:`LogicalView` when the groups cut them where they divide (:func:`factor_dims`),
    else a :class:`StraddlingView` (a group holds uneven parts of several dimensions).
    Kept on ``base`` per ``groups``: workloads built for one network and layout share one
    view, and with it the phase structures cached on it.

    Raises
    ------
    ConfigError
        The groups do not multiply to the NPU count.
    """
    kept = base.__dict__.setdefault("_logical_views", {})
    key = tuple(int(g) for g in groups)
    if key not in kept:
        kept[key] = _logical_view(base, key)
    return kept[key]


def _logical_view(base, groups: tuple[int, ...]) -> tuple[object, tuple[tuple[int, ...], ...]]:
    try:
        pieces, owned = factor_dims(tuple(int(s) for s in base.dims), groups)
    except ConfigError:
        return straddling_view(base, groups)
    if all(size == base.dims[d] for d, size in pieces):
        return base, owned
    return LogicalView(base, pieces), owned

