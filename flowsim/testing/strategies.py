"""Hypothesis strategies for flowsim's inputs (``hypothesis`` is imported when one is built).

* :func:`flow_instances` — ``(capacity, indptr, links)`` max-min instances;
* :func:`flow_sets` — :class:`~.problems.FlowProblem` DAGs of flows;
* :func:`small_networks` — ASTRA-sim network configs of Ring / FullyConnected / Switch blocks;
* :func:`system_configs` — system configs (chunks, policies, algorithms, synchronisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .problems import FlowProblem

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

BLOCKS = ("Ring", "FullyConnected", "Switch")
#: algorithms every group size accepts, and those that need a power of two, per collective
_ANY_SIZE = {"all-reduce-implementation": ("ring", "direct"),
             "reduce-scatter-implementation": ("ring", "direct"),
             "all-gather-implementation": ("ring", "direct"),
             "all-to-all-implementation": ("ring", "direct")}
_POWER_OF_TWO = {"all-reduce-implementation": ("halvingDoubling", "doubleBinaryTree"),
                 "reduce-scatter-implementation": ("halvingDoubling",),
                 "all-gather-implementation": ("halvingDoubling",),
                 "all-to-all-implementation": ()}


def _csr(rows: Sequence[Sequence[int]], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """CSR pointers and values of a list of rows."""
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return indptr, np.array([v for r in rows for v in r], dtype=dtype)


def flow_instances(max_links: int = 8, max_flows: int = 12
                   ) -> SearchStrategy[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Hypothesis strategy of ``(capacity, indptr, links)`` max-min instances."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw):
        n_links = draw(st.integers(1, max_links))
        capacity = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
        n_flows = draw(st.integers(1, max_flows))
        paths = [sorted(draw(st.sets(st.integers(0, n_links - 1), max_size=min(4, n_links))))
                 for _ in range(n_flows)]
        indptr, links = _csr(paths, np.int32)
        return np.array(capacity), indptr, links

    return build()


def flow_sets(max_links: int = 6, max_flows: int = 12,
              max_dependencies: int = 3) -> SearchStrategy[FlowProblem]:
    """Hypothesis strategy of :class:`~.problems.FlowProblem`: random DAGs of flows.

    Capacities, latencies, sizes and times are drawn partly from a few round values, so
    that events tie (flows finishing, starting and arriving together); some flows have no
    bytes, some no links, some zero-latency paths; release times, delays and dependencies
    (at most ``max_dependencies`` per flow, never a cycle: a flow depends only on flows
    earlier in a random order) are mixed in.
    """
    from hypothesis import strategies as st

    def value(low: float, high: float, round_values: Sequence[float]):
        return st.one_of(st.sampled_from(round_values), st.floats(low, high))

    @st.composite
    def build(draw) -> FlowProblem:
        n_links = draw(st.integers(1, max_links))
        n_flows = draw(st.integers(1, max_flows))
        capacity = draw(st.lists(value(0.5, 50.0, (1.0, 2.0, 10.0)),
                                 min_size=n_links, max_size=n_links))
        latency = draw(st.lists(value(0.0, 20.0, (0.0, 1.0, 5.0)),
                                min_size=n_links, max_size=n_links))
        paths = [sorted(draw(st.sets(st.integers(0, n_links - 1), max_size=min(3, n_links))))
                 for _ in range(n_flows)]
        nbytes = draw(st.lists(value(0.0, 1000.0, (0.0, 10.0, 100.0)),
                               min_size=n_flows, max_size=n_flows))
        release = draw(st.lists(value(0.0, 100.0, (0.0, 0.0, 10.0)),
                                min_size=n_flows, max_size=n_flows))
        delay = draw(st.lists(value(0.0, 10.0, (0.0, 0.0, 1.0)),
                              min_size=n_flows, max_size=n_flows))
        order = draw(st.permutations(range(n_flows)))
        deps: list[list[int]] = [[] for _ in range(n_flows)]
        for position, f in enumerate(order):
            if position:
                earlier = st.sampled_from(order[:position])
                deps[f] = sorted(draw(st.sets(earlier,
                                              max_size=min(max_dependencies, position))))
        indptr, links = _csr(paths, np.int32)
        dep_indptr, dep_ids = _csr(deps, np.int64)
        return FlowProblem.from_arrays(capacity, latency, indptr, links, nbytes,
                                       release_ns=release, delay_ns=delay,
                                       dep_indptr=dep_indptr, dep_ids=dep_ids)

    return build()


def small_networks(max_dims: int = 3, max_npus: int = 16, sizes: Sequence[int] = (2, 3, 4)
                   ) -> SearchStrategy[dict[str, Any]]:
    """Hypothesis strategy of network configs (mappings in ASTRA-sim 2.x keys).

    One to ``max_dims`` dimensions, each a Ring, FullyConnected or Switch of a size from
    ``sizes``, at most ``max_npus`` NPUs in all, bandwidths 10-400 GB/s and latencies
    0-1000 ns, no in-network reduction.
    """
    from hypothesis import strategies as st

    @st.composite
    def build(draw) -> dict[str, Any]:
        ndims = draw(st.integers(1, max_dims))
        npus_count: list[int] = []
        for _ in range(ndims):
            fitting = [p for p in sizes if int(np.prod(npus_count, dtype=int)) * p <= max_npus]
            if not fitting:
                break
            npus_count.append(draw(st.sampled_from(fitting)))
        n = len(npus_count)
        return {"topology": draw(st.lists(st.sampled_from(BLOCKS), min_size=n, max_size=n)),
                "npus_count": npus_count,
                "bandwidth": draw(st.lists(st.sampled_from([10.0, 50.0, 100.0, 400.0]),
                                           min_size=n, max_size=n)),
                "latency": draw(st.lists(st.sampled_from([0.0, 100.0, 500.0, 1000.0]),
                                         min_size=n, max_size=n))}

    return build()


def leaf_spine_fabrics(hosts: Sequence[int] = (2, 4), routings: Sequence[str] = ("ecmp", "hash"),
                       failures: bool = False) -> SearchStrategy[dict[str, Any]]:
    """Hypothesis strategy of small valid leaf-spine fabric configs (``{"fabric": ...}``).

    Hosts of 1, 2 or 4 NPUs on a scale-up switch, rail-optimized or not, oversubscribed 1:1 or
    2:1, one or more spines (parallel uplinks when fewer spines than uplinks), zero or non-zero
    latencies, routing from ``routings``; with ``failures``, sometimes leaf 0's uplinks to
    spine 0 failed (which may cut NPUs off: a ``RoutingError`` to expect).
    """
    from hypothesis import strategies as st

    @st.composite
    def build(draw) -> dict[str, Any]:
        n_hosts = draw(st.sampled_from(list(hosts)))
        per_host = draw(st.sampled_from([1, 2, 4]))
        per_leaf = draw(st.sampled_from([h for h in (1, 2, 4) if n_hosts % h == 0]))
        rails = draw(st.booleans())
        down = per_leaf * (1 if rails else per_host)       # NICs on a leaf
        ratio = draw(st.sampled_from([r for r in (1, 2) if down % r == 0]))
        uplinks = down // ratio
        fabric = {"generator": "leaf_spine", "hosts": n_hosts, "npus_per_host": per_host,
                  "scale_up": {"bandwidth": 400, "latency": draw(st.sampled_from([0, 100]))},
                  "nic": {"bandwidth": 50, "latency": draw(st.sampled_from([0, 500]))},
                  "hosts_per_leaf": per_leaf, "oversubscription": ratio, "rail_optimized": rails,
                  "spines": draw(st.sampled_from([s for s in range(1, uplinks + 1)
                                                  if uplinks % s == 0])),
                  "routing": draw(st.sampled_from(list(routings)))}
        if failures and draw(st.booleans()):
            fabric["fail"] = ["leaf0->spine0*"]
        return {"fabric": fabric}

    return build()


def system_configs(npus_count: Sequence[int] | None = None
                   ) -> SearchStrategy[dict[str, Any]]:
    """Hypothesis strategy of system configs (mappings in ASTRA-sim 2.x json keys).

    Chunks (1-4), chunks in flight per dimension (1-2), LIFO / FIFO, endpoint delay,
    local memory bandwidth, ``localBWAware`` / ``baseline``, ``barrier`` / ``per_npu``
    step synchronisation, ``per_dimension`` / ``flat`` ring delays, and one algorithm per
    dimension for every collective type: ``ring`` or ``direct`` anywhere, and where the
    dimension's size (from ``npus_count``, if given) is a power of two also
    ``halvingDoubling`` and (all-reduce) ``doubleBinaryTree``.
    """
    from hypothesis import strategies as st

    sizes = list(npus_count) if npus_count is not None else None

    @st.composite
    def build(draw) -> dict[str, Any]:
        config: dict[str, Any] = {
            "preferred-dataset-splits": draw(st.integers(1, 4)),
            "active-chunks-per-dimension": draw(st.integers(1, 2)),
            "scheduling-policy": draw(st.sampled_from(["LIFO", "FIFO"])),
            "endpoint-delay": draw(st.sampled_from([0, 10])),
            "local-mem-bw": draw(st.sampled_from([50, 1600])),
            "collective-optimization": draw(st.sampled_from(["localBWAware", "baseline"])),
            "step-synchronization": draw(st.sampled_from(["barrier", "per_npu"])),
            "ring-delays": draw(st.sampled_from(["per_dimension", "flat"])),
        }
        if sizes is not None:
            for key, anywhere in _ANY_SIZE.items():
                per_dim = []
                for p in sizes:
                    choices = anywhere + (_POWER_OF_TWO[key] if p & (p - 1) == 0 else ())
                    per_dim.append(draw(st.sampled_from(choices)))
                config[key] = per_dim
        return config

    return build()
