"""Invariant checks and hypothesis strategies, reusable by flowsim's tests and by users who
plug in their own algorithms or topologies (``hypothesis`` is needed for the strategies)."""

from __future__ import annotations

import numpy as np

#: Relative tolerance of the fairness checks.
RTOL = 1e-9


def assert_maxmin_fair(capacity: np.ndarray, indptr: np.ndarray, links: np.ndarray,
                       rates: np.ndarray, rtol: float = RTOL) -> None:
    """Raise ``AssertionError`` unless ``rates`` is the max-min fair allocation.

    Checks the two defining properties: no link carries more than its capacity, and every
    flow with links crosses a saturated link on which no flow has a larger rate.
    """
    capacity = np.asarray(capacity, float)
    indptr = np.asarray(indptr, np.int64)
    links = np.asarray(links, np.int64)
    n = indptr.size - 1
    flow_of = np.repeat(np.arange(n), np.diff(indptr))
    finite = np.isfinite(rates)
    assert np.all(finite == (np.diff(indptr) > 0)), "only flows without links may be infinite"
    assert np.all(rates[finite] >= 0), "negative rate"
    load = np.bincount(links, weights=rates[flow_of], minlength=capacity.size)
    assert np.all(load <= capacity * (1 + rtol) + 1e-12), \
        f"link over capacity by {np.max(load - capacity):.3g}"
    saturated = load >= capacity * (1 - rtol)
    top = np.zeros(capacity.size)
    np.maximum.at(top, links, rates[flow_of])
    ok_incidence = saturated[links] & (rates[flow_of] >= top[links] * (1 - rtol))
    has_bottleneck = np.zeros(n, bool)
    np.logical_or.at(has_bottleneck, flow_of, ok_incidence)
    missing = np.nonzero(finite & ~has_bottleneck)[0]
    assert missing.size == 0, f"flows without a bottleneck link: {missing[:10].tolist()}"


def flow_instances(max_links: int = 8, max_flows: int = 12):
    """Hypothesis strategy of ``(capacity, indptr, links)`` max-min instances."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw):
        n_links = draw(st.integers(1, max_links))
        capacity = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
        n_flows = draw(st.integers(1, max_flows))
        paths = [draw(st.sets(st.integers(0, n_links - 1), max_size=min(4, n_links)))
                 for _ in range(n_flows)]
        indptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64)
        links = np.array([link for p in paths for link in sorted(p)], dtype=np.int32)
        return np.array(capacity), indptr, links

    return build()
