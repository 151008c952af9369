"""The ``Network``: a multi-dimensional topology as link arrays, with vectorized routing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import segment_offsets
from ..errors import RoutingError
from .blocks import BLOCKS
from .grid import LogicalGrid
from .network_config import NetworkConfig


@dataclass(frozen=True, eq=False)
class Network(LogicalGrid):
    """A built network: NPUs, switch nodes and directed links as arrays.

    Node ids ``0..npus-1`` are NPUs (mixed-radix coordinates, dimension 0 fastest, as in
    ASTRA-sim); ``npus..npus+num_switches-1`` are switch nodes, one per instance of each
    ``Switch`` dimension. Links are directed; a duplex connection is two links.

    Attributes
    ----------
    config : NetworkConfig
        The validated description this network was built from.
    link_src, link_dst : ndarray of int64, shape (L,)
        Node ids at each end of every link.
    link_bandwidth : ndarray of float64, shape (L,)
        Capacity of every link in bytes/ns.
    link_latency : ndarray of float64, shape (L,)
        Latency of every link in ns.
    link_dim : ndarray of int64, shape (L,)
        Dimension each link belongs to.
    """

    config: NetworkConfig
    link_src: np.ndarray
    link_dst: np.ndarray
    link_bandwidth: np.ndarray
    link_latency: np.ndarray
    link_dim: np.ndarray
    num_switches: int
    _dim_link_offset: tuple[int, ...]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config: NetworkConfig) -> Network:
        """Build the link arrays of every dimension instance of ``config``."""
        npus = config.npus
        srcs, dsts, bws, lats, dims = [], [], [], [], []
        link_offset = []
        n_links = 0
        n_switches = 0
        stride = 1
        for d, (name, p) in enumerate(zip(config.topology, config.npus_count)):
            block = BLOCKS[name]
            instances = npus // p
            local_src, local_dst = block.local_links(p)
            # NPU id of local coordinate c in instance q: the other coordinates come from q.
            q = np.arange(instances)[:, None]
            base = (q // stride) * stride * p + (q % stride)

            link_offset.append(n_links)
            first_switch = npus + n_switches
            srcs.append(_instance_nodes(local_src, p, base, stride, q, first_switch))
            dsts.append(_instance_nodes(local_dst, p, base, stride, q, first_switch))
            count = instances * block.num_links(p)
            bws.append(np.full(count, config.bandwidth_bytes_per_ns[d]))
            lats.append(np.full(count, config.latency_ns[d]))
            dims.append(np.full(count, d))
            n_links += count
            n_switches += instances if block.has_switch else 0
            stride *= p
        return cls(config=config,
                   link_src=np.concatenate(srcs).astype(np.int64),
                   link_dst=np.concatenate(dsts).astype(np.int64),
                   link_bandwidth=np.concatenate(bws).astype(np.float64),
                   link_latency=np.concatenate(lats).astype(np.float64),
                   link_dim=np.concatenate(dims).astype(np.int64),
                   num_switches=n_switches,
                   _dim_link_offset=tuple(link_offset))

    # ------------------------------------------------------------------ shape
    @property
    def npus(self) -> int:  # type: ignore[override]  # LogicalView: an attribute
        """Number of NPUs."""
        return self.config.npus

    @property
    def num_nodes(self) -> int:
        """NPUs plus switch nodes."""
        return self.npus + self.num_switches

    @property
    def num_links(self) -> int:
        return int(self.link_src.shape[0])

    @property
    def dims(self) -> tuple[int, ...]:  # type: ignore[override]  # as npus
        """NPUs per dimension."""
        return self.config.npus_count

    #: groups of a dimension are exact replicas (same links, disjoint): see can_replicate
    replicable = True

    def routes_multipath(self, src: np.ndarray, dst: np.ndarray, *,
                         lowest_dim_only: bool = False) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray, np.ndarray]:
        """Routes as flows of messages: ``(message, weight, indptr, link_ids)``. On this
        network every message is one flow on one path."""
        indptr, links = self.routes(src, dst, lowest_dim_only=lowest_dim_only)
        n = indptr.size - 1
        return np.arange(n), np.ones(n), indptr, links

    def tile_first_instance(self, per_link: np.ndarray) -> np.ndarray:
        """Copy the first instance's per-link values of every dimension to all its instances.

        The instances of a dimension are replicas (same blocks, same link order, disjoint
        links), so a quantity simulated on the first instance only (bytes, busy time) holds
        for every instance.

        Parameters
        ----------
        per_link : ndarray, shape (num_links, ...)
            Values per link; only those of each dimension's first instance are read.

        Returns
        -------
        ndarray
            A new array of the same shape with every instance holding its dimension's first
            instance's values.
        """
        per_link = np.asarray(per_link)
        if per_link.shape[:1] != (self.num_links,):
            raise RoutingError(f"tile_first_instance: expected {self.num_links} per-link "
                               f"values, found shape {per_link.shape}")
        out = per_link.copy()
        offsets = [*self._dim_link_offset, self.num_links]
        for d in range(self.ndims):
            start, stop = offsets[d], offsets[d + 1]
            instances = self.npus // self.dims[d]
            per_instance = (stop - start) // instances
            first = per_link[start: start + per_instance]
            out[start:stop] = np.tile(first, (instances,) + (1,) * (first.ndim - 1))
        return out

    def switch_links(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Uplink and downlink ids of a Switch dimension, each shaped like ``dim_groups(dim)``."""
        if self.config.topology[dim] != "Switch":
            raise RoutingError(f"dimension {dim} is a {self.config.topology[dim]}, not a Switch")
        p = self.dims[dim]
        groups = self.shared_dim_groups(dim)
        base = self._dim_link_offset[dim] + np.arange(groups.shape[0])[:, None] * 2 * p
        local = np.arange(p)[None, :]
        return base + local, base + p + local

    # ------------------------------------------------------------------ routing
    def routes(self, src: np.ndarray, dst: np.ndarray, *,
               lowest_dim_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Dimension-ordered routes of NPU pairs as a CSR flow-link incidence.

        Parameters
        ----------
        src, dst : array_like of int, shape (n,)
            NPU ids. A pair with ``src == dst`` gets an empty path.
        lowest_dim_only : bool
            Route only through the lowest dimension in which ``src`` and ``dst`` differ, the
            way ASTRA-sim's congestion-unaware backend charges a message (it ignores the
            other dimensions). Used by the analytical model for flat ``one*`` algorithms.

        Returns
        -------
        indptr : ndarray of int64, shape (n + 1,)
            Path of pair ``i`` is ``link_ids[indptr[i]:indptr[i+1]]``, in traversal order.
        link_ids : ndarray of int32, shape (indptr[-1],)
        """
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise RoutingError(f"routes: src and dst must have the same length, "
                               f"found {src.size} and {dst.size}")
        self.check_npus(src, dst)
        n = src.size
        hops_per_dim = []
        current = src.copy()
        routed = np.zeros(n, dtype=bool)
        for d, name in enumerate(self.config.topology):
            s, p = self.strides[d], self.dims[d]
            a, b = (current // s) % p, (dst // s) % p
            h = BLOCKS[name].hops(a, b, p).astype(np.int64)
            if lowest_dim_only:
                h[routed] = 0
                routed |= h > 0
            hops_per_dim.append(h)
            current = current + (b - a) * s
        total = np.sum(hops_per_dim, axis=0) if n else np.zeros(0, np.int64)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(total, out=indptr[1:])
        link_ids = np.empty(int(indptr[-1]), dtype=np.int32)
        offset = indptr[:-1].copy()
        current = src.copy()
        for d, name in enumerate(self.config.topology):
            block = BLOCKS[name]
            s, p = self.strides[d], self.dims[d]
            h = hops_per_dim[d]
            a, b = (current // s) % p, (dst // s) % p
            moving = np.nonzero(h)[0]
            if moving.size:
                rep = np.repeat(moving, h[moving])
                k = segment_offsets(h[moving])  # hop index within this dimension
                local = block.hop_link(a[rep], b[rep], k, p)
                inst = self.instance_of(current[rep], d)
                link_ids[offset[rep] + k] = (self._dim_link_offset[d]
                                             + inst * block.num_links(p) + local)
                offset += h
            current = current + (b - a) * s
        return indptr, link_ids


def _instance_nodes(local: np.ndarray, p: int, base: np.ndarray, stride: int, q: np.ndarray,
                    first_switch: int) -> np.ndarray:
    """Node ids of local indices (``p`` = the instance's switch) in every instance ``q``."""
    is_switch = local == p
    npu = base + np.where(is_switch, 0, local)[None, :] * stride
    return np.where(is_switch[None, :], first_switch + q, npu).ravel()
