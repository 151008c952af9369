"""Max-min fair rates: fairness invariants, the numpy oracle, a brute-force solver."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim import maxmin_rates
from flowsim.errors import FlowSetError
from flowsim.network import maxmin_rates_reference
from flowsim.testing import assert_maxmin_fair, flow_instances


def brute_force_maxmin(capacity, indptr, links):
    """Max-min by definition: the allocation whose sorted rate vector is lexicographically
    largest, found by water-filling with exact bottleneck search over all link subsets'
    fair shares (tiny instances only)."""
    n = len(indptr) - 1
    paths = [set(links[indptr[f]:indptr[f + 1]].tolist()) for f in range(n)]
    rates = np.full(n, np.inf)
    fixed = [not p for p in paths]
    remaining = np.array(capacity, float)
    while not all(fixed):
        best = np.inf
        for link in range(len(capacity)):
            users = [f for f in range(n) if not fixed[f] and link in paths[f]]
            if users:
                best = min(best, remaining[link] / len(users))
        # freeze every unfixed flow on a link achieving the minimum share
        for link in range(len(capacity)):
            users = [f for f in range(n) if not fixed[f] and link in paths[f]]
            if users and np.isclose(remaining[link] / len(users), best, rtol=1e-12, atol=0):
                for f in users:
                    if not fixed[f]:
                        rates[f] = best
                        fixed[f] = True
                        for m in paths[f]:
                            remaining[m] -= best
    return rates


def test_documented_example():
    np.testing.assert_allclose(maxmin_rates([10.0, 2.0], [0, 1, 3], [0, 0, 1]), [8.0, 2.0])


def test_flow_without_links_is_unbounded():
    rates = maxmin_rates([4.0], [0, 0, 1], [0])
    assert rates[0] == np.inf and rates[1] == 4.0


def test_parking_lot():
    # one long flow over 3 links, one short flow on each link: everybody gets half
    cap = np.ones(3)
    indptr = np.array([0, 3, 4, 5, 6])
    links = np.array([0, 1, 2, 0, 1, 2])
    np.testing.assert_allclose(maxmin_rates(cap, indptr, links), [0.5] * 4)


@settings(max_examples=300, deadline=None)
@given(flow_instances())
def test_kernel_is_max_min_fair(instance):
    capacity, indptr, links = instance
    rates = maxmin_rates(capacity, indptr, links)
    assert_maxmin_fair(capacity, indptr, links, rates)


@settings(max_examples=200, deadline=None)
@given(flow_instances())
def test_kernel_matches_numpy_reference(instance):
    capacity, indptr, links = instance
    np.testing.assert_allclose(maxmin_rates(capacity, indptr, links),
                               maxmin_rates_reference(capacity, indptr, links), rtol=1e-9)


@settings(max_examples=100, deadline=None)
@given(flow_instances(max_links=5, max_flows=6))
def test_kernel_matches_brute_force(instance):
    capacity, indptr, links = instance
    np.testing.assert_allclose(maxmin_rates(capacity, indptr, links),
                               brute_force_maxmin(capacity, indptr, links), rtol=1e-9)


def test_checker_rejects_unfair_allocations():
    cap = np.array([10.0, 2.0])
    indptr, links = np.array([0, 1, 3]), np.array([0, 0, 1])
    with pytest.raises(AssertionError, match="over capacity"):
        assert_maxmin_fair(cap, indptr, links, np.array([9.0, 2.0]))
    with pytest.raises(AssertionError, match="without a bottleneck"):
        assert_maxmin_fair(cap, indptr, links, np.array([5.0, 2.0]))


def test_large_random_instance_is_fair():
    rng = np.random.default_rng(7)
    n_links, n_flows = 2000, 20000
    lengths = rng.integers(1, 5, n_flows)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    links = np.concatenate([rng.choice(n_links, k, replace=False) for k in lengths])
    capacity = rng.uniform(1, 50, n_links)
    rates = maxmin_rates(capacity, indptr, links)
    assert_maxmin_fair(capacity, indptr, links, rates)


@pytest.mark.parametrize("capacity,indptr,links,match", [
    ([0.0], [0, 1], [0], "capacity"),
    ([1.0], [0, 2], [0], "indptr"),
    ([1.0], [0, 1], [3], "link ids"),
    ([np.nan], [0, 1], [0], "capacity"),
])
def test_bad_incidence(capacity, indptr, links, match):
    with pytest.raises(FlowSetError, match=match):
        maxmin_rates(capacity, indptr, links)


def test_oracles_on_a_hand_solved_case():
    # f0 on link 0, f1 on link 1, f2 on both; link 1 (capacity 1) saturates first at 0.5,
    # then f0 takes what is left of link 0: 3 - 0.5
    cap, indptr, links = [3.0, 1.0], np.array([0, 1, 2, 4]), np.array([0, 1, 0, 1])
    for solver in (brute_force_maxmin, maxmin_rates_reference, maxmin_rates):
        np.testing.assert_allclose(solver(cap, indptr, links), [2.5, 0.5, 0.5])


def _solve_active(capacity, indptr, links, active, workspace=None, reuse=False,
                  counted=False):
    """Rates of the flows ``active`` from the kernel (no copies), in ``workspace`` (made if
    None); ``counted``: hand it the active flows per link, as the event loop does."""
    from flowsim.network import _maxmin_kernels
    from flowsim.network.maxmin import NO_COPIES, MaxMinWorkspace
    n_flows = len(indptr) - 1
    ws = workspace or MaxMinWorkspace(len(capacity), n_flows, len(links))
    indptr, links = np.asarray(indptr, np.int64), np.asarray(links, np.int32)
    active = np.asarray(active, np.int64)
    n_counted = -1
    if counted:
        per_link = np.bincount(np.concatenate([links[indptr[f]:indptr[f + 1]] for f in active]),
                               minlength=len(capacity))
        held = np.nonzero(per_link)[0]
        ws.unfrozen[held] = per_link[held]
        ws.touched[:held.size] = held[::-1]   # any order
        n_counted = held.size
    rates = np.full(n_flows, np.nan)
    _maxmin_kernels.maxmin_active(np.asarray(capacity, float), indptr, links, NO_COPIES,
                                  active, len(active), rates, *ws.kernel_args(), reuse,
                                  n_counted)
    return rates, ws


@settings(max_examples=300, deadline=None)
@given(flow_instances(max_links=8, max_flows=16), st.data())
def test_reused_link_lists_give_the_same_bits(instance, data):
    """The engine keeps the solver's link -> flows lists while flows only finish, and hands
    it the active flows per link it counts: solving the survivors (in any order) with the
    lists of a solve of all flows, with or without the counts, gives the bits of a solve
    from scratch."""
    capacity, indptr, links = instance
    n = len(indptr) - 1
    survivors = data.draw(st.permutations(range(n)))[:data.draw(st.integers(1, n))]
    counted = data.draw(st.booleans())
    _, ws = _solve_active(capacity, indptr, links, range(n))
    reused, _ = _solve_active(capacity, indptr, links, survivors, ws, reuse=True,
                              counted=counted)
    fresh, _ = _solve_active(capacity, indptr, links, survivors)
    np.testing.assert_array_equal(reused[survivors], fresh[survivors])
