"""Logical NPU grids: NPU ids as mixed-radix coordinates over a tuple of dimension sizes.

Shared by the multi-dimensional :class:`~.network.Network` (whose dimensions are its
building blocks) and the graph :class:`~.fabric_network.FabricNetwork` (whose dimensions
are logical, as ASTRA-sim's ns-3 backend maps a logical topology onto a physical one).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from .._arrays import segment_min, segment_sum
from ..errors import RoutingError


class LogicalGrid:
    """NPU ids as mixed-radix coordinates over ``dims`` (dimension 0 fastest), shared by the
    multi-dimensional networks and the fabrics (whose dims are logical)."""

    dims: tuple[int, ...]
    npus: int
    link_latency: np.ndarray
    link_bandwidth: np.ndarray

    #: whether routes merge the flows of twin links into one flow with a multiplicity
    #: (fabrics with ECMP spraying, see ``FabricNetwork``)
    merges_twins = False

    @property
    def engine_capacity(self) -> np.ndarray:
        """Capacity of every link as the flow engine sees it (bytes/ns): the bandwidth, or a
        twin group's total on its representative link where routes merge twins."""
        return self.link_bandwidth

    def spread_links(self, link_bytes: np.ndarray,
                     link_busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-link results of the engine's links as the network's links (the identity, or
        a twin group's bytes shared evenly by its links and its busy time copied)."""
        return link_bytes, link_busy

    def path_latency(self, indptr: np.ndarray, link_ids: np.ndarray) -> np.ndarray:
        """Sum of link latencies along each path (ns)."""
        return segment_sum(self.link_latency[link_ids], indptr)

    def path_bottleneck(self, indptr: np.ndarray, link_ids: np.ndarray) -> np.ndarray:
        """Smallest link bandwidth along each path (bytes/ns); ``inf`` for empty paths."""
        return segment_min(self.link_bandwidth[link_ids], indptr)

    def check_npus(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Every id of ``src`` and ``dst`` (int64 arrays) is an NPU of this network.

        Raises
        ------
        RoutingError
            Naming the first id that is not.
        """
        for name, arr in (("src", src), ("dst", dst)):
            bad = (arr < 0) | (arr >= self.npus)
            if bad.any():
                raise RoutingError(f"routes: {name} NPU {int(arr[bad][0])} does not exist "
                                   f"(expected an id in 0..{self.npus - 1})")

    @property
    def ndims(self) -> int:
        return len(self.dims)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """Id distance between neighbours along each dimension (1, p0, p0*p1, ...)."""
        return tuple(int(math.prod(self.dims[:d])) for d in range(self.ndims))

    def coords(self, npus: np.ndarray | int) -> np.ndarray:
        """Coordinates of NPU ids, shape ``(n, ndims)``."""
        ids = np.atleast_1d(np.asarray(npus, dtype=np.int64))
        return np.stack([(ids // s) % p for s, p in zip(self.strides, self.dims)], axis=-1)

    def instance_of(self, npus: np.ndarray, dim: int) -> np.ndarray:
        """Index of the instance of dimension ``dim`` each NPU belongs to."""
        s, p = self.strides[dim], self.dims[dim]
        return (npus // (s * p)) * s + npus % s

    def dim_groups(self, dims: int | tuple[int, ...]) -> np.ndarray:
        """NPU ids of every group spanning ``dims``, shape ``(groups, size)``.

        A group is the set of NPUs that share every coordinate outside ``dims``; columns are
        in mixed-radix order of the coordinates in ``dims`` (lowest dimension fastest), rows
        in mixed-radix order of the other coordinates. With one dimension, the groups are its
        instances. A dimension given twice counts once. The array is the caller's own (see
        :meth:`shared_dim_groups` for the cached one).
        """
        return np.array(self.shared_dim_groups(dims), order="C")

    def shared_dim_groups(self, dims: int | tuple[int, ...]) -> np.ndarray:
        """:meth:`dim_groups`, cached per network shape and dimension set and read-only:
        shared by every caller, for the simulator's own repeated use."""
        dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(sorted(set(dims)))
        cache = self.__dict__.setdefault("_dim_groups", {})
        key = (tuple(self.dims), dims)
        groups = cache.get(key)
        if groups is None:
            bad = [d for d in dims if not 0 <= d < self.ndims]
            if bad:
                raise ValueError(f"dimension {bad[0]} of a {self.ndims}-dimensional network")
            # NPU ids laid out C-order over the dimensions, highest first (so dimension d is
            # axis ndims-1-d), then the other dimensions and ``dims`` each highest first:
            # rows and columns come out in mixed-radix order, lowest dimension fastest
            last = self.ndims - 1
            others = [last - d for d in reversed(range(self.ndims)) if d not in dims]
            inner = [last - d for d in reversed(dims)]
            grid = np.arange(self.npus, dtype=np.int64).reshape(self.dims[::-1])
            width = math.prod(self.dims[d] for d in dims)
            groups = cache[key] = grid.transpose(others + inner).reshape(-1, width)
        groups.flags.writeable = False   # again after a copy or unpickling made it writeable
        return groups
