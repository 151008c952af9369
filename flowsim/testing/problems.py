"""A flow set with everything needed to time it, as one value.

:class:`FlowProblem` bundles the arguments of :func:`flowsim.simulate_flows`, so that the
strategies can draw one, the fast engine and the reference can both run it, and the invariant
checkers can judge a result against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True, kw_only=True, eq=False)
class FlowProblem:
    """A DAG of flows on a set of links (the arguments of :func:`flowsim.simulate_flows`).

    Attributes
    ----------
    capacity, link_latency : ndarray of float64, shape (L,)
        Link capacity (bytes/ns, > 0) and latency (ns, >= 0).
    indptr : ndarray of int64, shape (F + 1,)
    links : ndarray of int32, shape (indptr[-1],)
        CSR path incidence: flow ``f`` crosses ``links[indptr[f]:indptr[f + 1]]``.
    nbytes, release_ns, delay_ns : ndarray of float64, shape (F,)
        Bytes of each flow, its earliest start, and its wait between readiness and start.
    dep_indptr : ndarray of int64, shape (F + 1,)
    dep_ids : ndarray of int64
        CSR of dependencies: flow ``f`` waits for the arrival of
        ``dep_ids[dep_indptr[f]:dep_indptr[f + 1]]``.
    """

    capacity: np.ndarray
    link_latency: np.ndarray
    indptr: np.ndarray
    links: np.ndarray
    nbytes: np.ndarray
    release_ns: np.ndarray
    delay_ns: np.ndarray
    dep_indptr: np.ndarray
    dep_ids: np.ndarray

    @classmethod
    def from_arrays(cls, capacity: ArrayLike, link_latency: ArrayLike, indptr: ArrayLike,
                    links: ArrayLike, nbytes: ArrayLike, *, release_ns: ArrayLike | None = None,
                    delay_ns: ArrayLike | None = None, dep_indptr: ArrayLike | None = None,
                    dep_ids: ArrayLike | None = None) -> FlowProblem:
        """Normalise array-likes (missing times are 0, missing dependencies none)."""
        indptr = np.asarray(indptr, np.int64)
        n = indptr.size - 1

        def per_flow(values: ArrayLike | None) -> np.ndarray:
            values = 0.0 if values is None else values
            return np.array(np.broadcast_to(np.asarray(values, np.float64), (n,)))

        return cls(capacity=np.asarray(capacity, np.float64),
                   link_latency=np.asarray(link_latency, np.float64), indptr=indptr,
                   links=np.asarray(links, np.int32), nbytes=per_flow(nbytes),
                   release_ns=per_flow(release_ns), delay_ns=per_flow(delay_ns),
                   dep_indptr=np.zeros(n + 1, np.int64) if dep_indptr is None
                   else np.asarray(dep_indptr, np.int64),
                   dep_ids=np.zeros(0, np.int64) if dep_ids is None
                   else np.asarray(dep_ids, np.int64))

    @property
    def num_flows(self) -> int:
        return self.indptr.size - 1

    @property
    def num_links(self) -> int:
        return self.capacity.size

    def path(self, f: int) -> np.ndarray:
        """Link ids flow ``f`` crosses."""
        return self.links[self.indptr[f]: self.indptr[f + 1]]

    def dependencies(self, f: int) -> np.ndarray:
        """Flows whose arrival flow ``f`` waits for."""
        return self.dep_ids[self.dep_indptr[f]: self.dep_indptr[f + 1]]

    def dependants(self) -> list[list[int]]:
        """For every flow, the flows that wait for its arrival."""
        out: list[list[int]] = [[] for _ in range(self.num_flows)]
        for f in range(self.num_flows):
            for d in self.dependencies(f):
                out[int(d)].append(f)
        return out

    def path_latency(self) -> np.ndarray:
        """Latency of every flow's path (ns): the sum over its links, 0 without links."""
        return np.array([self.link_latency[self.path(f)].sum() for f in range(self.num_flows)])

    def path_bottleneck(self) -> np.ndarray:
        """Smallest capacity on every flow's path (bytes/ns), ``inf`` without links."""
        return np.array([self.capacity[self.path(f)].min() if self.path(f).size else np.inf
                         for f in range(self.num_flows)])

    def arguments(self) -> dict[str, np.ndarray]:
        """Keyword arguments of :func:`flowsim.simulate_flows` (add ``model=``)."""
        return {"capacity": self.capacity, "link_latency": self.link_latency,
                "indptr": self.indptr, "links": self.links, "nbytes": self.nbytes,
                "release_ns": self.release_ns, "delay_ns": self.delay_ns,
                "dep_indptr": self.dep_indptr, "dep_ids": self.dep_ids}
