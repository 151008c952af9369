"""The fast kernels agree with the readable references of :mod:`flowsim.testing.reference`:
the event loop (both models) on random DAGs of flows, the per-message loads on random and
routed multi-path flows, and the ECMP / hash path expansion on the bundled fabrics, random
leaf-spines and random next-hop tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.testing import (
    FlowProblem,
    expand_paths_reference,
    fabric_next_hops_reference,
    flow_sets,
    leaf_spine_fabrics,
    message_loads_reference,
    run_events_reference,
)
from flowsim.testing._targets import (
    EXPANDED,
    NO_CONVERGENCE,
    expand_paths,
    message_loads,
    path_kernel_args,
    simulate_flows,
)

#: the fast engine and the reference agree to this (relative, and absolute in ns or bytes)
RTOL = 1e-9
ATOL = 1e-6
TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
FLOW_FIELDS = ("start_ns", "send_end_ns", "finish_ns", "link_bytes", "link_busy_ns")


def assert_same_timing(fast, reference) -> None:
    for name in FLOW_FIELDS:
        np.testing.assert_allclose(getattr(fast, name), getattr(reference, name), rtol=RTOL,
                                   atol=ATOL, err_msg=name)
    assert fast.time_ns == pytest.approx(reference.time_ns, rel=RTOL, abs=ATOL)


# ---------------------------------------------------------------- run_events
def test_reference_solves_the_hand_cases():
    # two 100-byte flows share one 10 B/ns link with 5 ns latency: 200 B / 10 + 5 together,
    # 100 B / 10 + 5 each when alone
    shared = dict(capacity=[10.0], link_latency=[5.0], indptr=[0, 1, 2], links=[0, 0],
                  nbytes=[100.0, 100.0])
    flow = run_events_reference(**shared, model="flow")
    np.testing.assert_allclose(flow.finish_ns, [25.0, 25.0])
    np.testing.assert_allclose(flow.link_busy_ns, [20.0])
    np.testing.assert_allclose(run_events_reference(**shared, model="analytical").finish_ns,
                               [15.0, 15.0])
    # flow 1 waits for flow 0 and 3 ns more; flow 2 is released at 100
    chain = run_events_reference([10.0, 10.0], [5.0, 5.0], [0, 1, 2, 3], [0, 1, 1],
                                 [100.0, 50.0, 10.0], release_ns=[0, 0, 100],
                                 delay_ns=[0, 3, 0], dep_indptr=[0, 0, 1, 1], dep_ids=[0])
    np.testing.assert_allclose(chain.start_ns, [0.0, 18.0, 100.0])
    np.testing.assert_allclose(chain.finish_ns, [15.0, 28.0, 106.0])
    # no bytes, or no links: arrival one path latency after the start
    idle = run_events_reference([10.0, 10.0], [7.0, 4.0], [0, 2, 2], [0, 1], [0.0, 5.0])
    np.testing.assert_allclose(idle.finish_ns, [11.0, 0.0])
    np.testing.assert_allclose(idle.link_bytes, [0.0, 0.0])


def test_reference_refuses_a_dependency_cycle():
    with pytest.raises(ValueError, match="cycle"):
        run_events_reference([1.0], [0.0], [0, 1, 2], [0, 0], [1.0, 1.0],
                             dep_indptr=[0, 1, 2], dep_ids=[1, 0])


@settings(max_examples=100, deadline=None, derandomize=True)
@given(flow_sets(max_links=6, max_flows=12))
def test_run_events_matches_the_reference(problem: FlowProblem):
    for model in ("analytical", "flow"):
        fast = simulate_flows(**problem.arguments(), model=model)
        assert_same_timing(fast, run_events_reference(**problem.arguments(), model=model))


def test_run_events_matches_the_reference_under_heavy_sharing():
    # many flows over few links with the same sizes: ties everywhere, batched retirements
    rng = np.random.default_rng(7)
    n, n_links = 60, 4
    paths = [np.sort(rng.choice(n_links, rng.integers(1, 4), replace=False))
             for _ in range(n)]
    indptr = np.concatenate([[0], np.cumsum([p.size for p in paths])])
    problem = FlowProblem.from_arrays(
        np.array([1.0, 2.0, 4.0, 2.0]), np.array([0.0, 1.0, 0.0, 2.0]), indptr,
        np.concatenate(paths), rng.choice([0.0, 8.0, 16.0], n),
        release_ns=rng.choice([0.0, 4.0], n),
        dep_indptr=np.concatenate([[0], np.arange(n)]), dep_ids=np.arange(n - 1) // 3)
    for model in ("analytical", "flow"):
        fast = simulate_flows(**problem.arguments(), model=model)
        assert_same_timing(fast, run_events_reference(**problem.arguments(), model=model))


# ---------------------------------------------------------------- message_loads
@st.composite
def multipath_messages(draw):
    """Random messages, each split over one to four weighted paths."""
    n_links = draw(st.integers(1, 8))
    n_messages = draw(st.integers(1, 6))
    message, weight, paths = [], [], []
    for m in range(n_messages):
        n_paths = draw(st.integers(0, 4))
        shares = draw(st.lists(st.floats(0.1, 1.0), min_size=n_paths, max_size=n_paths))
        for share in shares:
            message.append(m)
            weight.append(share / sum(shares))
            paths.append(draw(st.lists(st.integers(0, n_links - 1), max_size=4, unique=True)))
    bandwidth = draw(st.lists(st.sampled_from([1.0, 2.5, 10.0]) | st.floats(0.5, 50.0),
                              min_size=n_links, max_size=n_links))
    latency = draw(st.lists(st.floats(0.0, 100.0), min_size=len(paths), max_size=len(paths)))
    indptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64)
    links = np.array([link for p in paths for link in p], np.int64)
    return (indptr, links, np.array(weight), np.array(message, np.int64), np.array(latency),
            np.array(bandwidth), n_messages)


def assert_same_loads(args) -> None:
    """The jitted pass and the vectorized one agree to the bit (same sums in the same
    order): small steps take one, large ones the other, and a run must not tell."""
    fast = message_loads(*args)
    reference = message_loads_reference(*args)
    for name, x, y in zip(("latency", "per_byte", "busy"), fast, reference):
        np.testing.assert_array_equal(x, y, err_msg=name)


def test_message_loads_reference_hand_case():
    # message 0 split evenly over links 0 and 1 (bandwidths 1 and 4), then both over link 2
    # (bandwidth 2); message 1 alone on link 1
    args = (np.array([0, 2, 4, 5]), np.array([0, 2, 1, 2, 1]), np.array([0.5, 0.5, 1.0]),
            np.array([0, 0, 1]), np.array([3.0, 7.0, 1.0]), np.array([1.0, 4.0, 2.0]), 2)
    latency, per_byte, busy = message_loads_reference(*args)
    np.testing.assert_allclose(latency, [7.0, 1.0])
    np.testing.assert_allclose(per_byte, [0.5, 0.25])  # max(0.5/1, 0.5/4, 1/2); 1/4
    np.testing.assert_allclose(busy, [0.5, 0.75, 0.5])
    assert_same_loads(args)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(multipath_messages())
def test_message_loads_matches_the_reference(args):
    assert_same_loads(args)


# ---------------------------------------------------------------- expand_paths
def reference_args(net, src: np.ndarray, dst: np.ndarray, single: bool) -> tuple:
    """The reference walk's arguments: the dense next-hop table of the fabric (every node to
    every NPU), the kernel's hash key and depth."""
    hop_ptr, hop_links = fabric_next_hops_reference(net)
    kernel = path_kernel_args(net, src, dst, single)
    src_, dst_, key, depth = kernel[5], kernel[6], kernel[8], kernel[9]
    return (hop_ptr, hop_links, np.asarray(net.link_dst, np.int64), net.npus, src_, dst_,
            single, key, depth)


def assert_same_paths(net, src: np.ndarray, dst: np.ndarray, single: bool) -> None:
    """The kernel over the fabric's anchor tables walks the paths the reference walks over
    the dense table: same flows, weights and links, in the same order."""
    message, weight, mult, indptr, links, mixed, status = expand_paths(
        *path_kernel_args(net, src, dst, single))
    reference = expand_paths_reference(*reference_args(net, src, dst, single))
    assert mixed == reference[4] and status == reference[5]
    assert np.all(mult == 1.0)   # twins are merged only when asked
    for name, x, y in zip(("message", "weight", "indptr", "links"),
                          (message, weight, indptr, links), reference):
        np.testing.assert_array_equal(x, y, err_msg=name)


def assert_kernel_walks_like_the_reference(config, limit: int) -> tuple:
    """Every ordered NPU pair of the fabric (or ``limit`` of them) walked by the kernel and
    the reference alike, spraying and hashing; returns the network and the pairs."""
    net = flowsim.load_network(config)
    src, dst = all_pairs(net.npus, limit=limit)
    for single in (False, True):
        assert_same_paths(net, src, dst, single)
    return net, src, dst


def canonical_paths(message, weight, indptr, links) -> list:
    """Sorted ``(message, links, weight)`` triples: path sets compared regardless of order."""
    return sorted((int(message[f]), tuple(links[indptr[f]: indptr[f + 1]].tolist()),
                   float(weight[f])) for f in range(message.size))


def all_pairs(npus: int, limit: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered NPU pair (self pairs too), or ``limit`` of them at random."""
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(npus), np.arange(npus)))
    if src.size > limit:
        pick = np.sort(np.random.default_rng(seed).choice(src.size, limit, replace=False))
        src, dst = src[pick], dst[pick]
    return src, dst


def bundled_fabrics() -> list[str]:
    names = []
    for path in sorted(TOPOLOGIES.glob("*.yml")):
        if "fabric" in path.read_text() or "infragraph" in path.name:
            names.append(path.stem)
    return names


@pytest.mark.parametrize("name", bundled_fabrics())
def test_expand_paths_matches_the_reference_on_bundled_fabrics(name):
    net, _, _ = assert_kernel_walks_like_the_reference(name, limit=400)
    assert net.config.topology[0] == "Fabric"


@settings(max_examples=40, deadline=None, derandomize=True)
@given(leaf_spine_fabrics())
def test_expand_paths_and_fabric_routes_match_the_reference_on_leaf_spines(config):
    net, src, dst = assert_kernel_walks_like_the_reference(config, limit=256)
    # the public routes: ECMP gives the reference's path set; hash routing one of its paths
    spray = expand_paths_reference(*reference_args(net, src, dst, False))
    routed = net.routes_multipath(src, dst)
    if config["fabric"]["routing"] == "ecmp":
        assert canonical_paths(*routed) == canonical_paths(*spray[:4])
    else:
        candidates = set(canonical_paths(*spray[:4]))
        for message, path, weight in canonical_paths(*routed):
            assert weight == 1.0
            assert any(m == message and p == path for m, p, _ in candidates)


@st.composite
def explicit_fabrics(draw) -> dict:
    """Small explicit fabrics over random graphs: NPUs linked to switches and to each other,
    parallel and one-way links, zero and equal latencies (many equal-cost paths), and NPUs
    that cannot reach every other."""
    npus = draw(st.integers(2, 5))
    switches = draw(st.integers(0, 4))
    nodes = [*range(npus), *(f"s{k}" for k in range(switches))]
    links = []
    for i in range(draw(st.integers(npus, 14))):
        a = nodes[i] if i < npus else draw(st.sampled_from(nodes))   # every NPU has a link
        b = draw(st.sampled_from([n for n in nodes if n != a]))
        links.append({"src": a, "dst": b, "bandwidth": draw(st.sampled_from([50, 100])),
                      "latency": draw(st.sampled_from([0, 100, 100, 200])),
                      "duplex": draw(st.booleans())})
    return {"fabric": {"npus": npus, "switches": [n for n in nodes[npus:]], "links": links}}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(explicit_fabrics())
def test_expand_paths_matches_the_reference_on_random_fabrics(config):
    assert_kernel_walks_like_the_reference(config, limit=64)


def test_expand_paths_reference_weights_and_cycles():
    # node 0 -> {1, 2} -> 3 over links 0..3, and a direct link 4: 0 -> 3
    link_dst = np.array([1, 2, 3, 3, 3])
    hops = {(0, 3): [0, 1, 4], (1, 3): [2], (2, 3): [3]}
    npus, nodes = 4, 4
    hop_ptr = np.zeros(nodes * npus + 1, np.int64)
    hop_links = []
    for k in range(nodes * npus):
        found = hops.get(divmod(k, npus), [])
        hop_links += found
        hop_ptr[k + 1] = hop_ptr[k] + len(found)
    args = (hop_ptr, np.array(hop_links), link_dst, npus, np.array([0, 2]), np.array([3, 2]),
            False, np.array([0, 0]), nodes + 1)
    message, weight, indptr, links, mixed, status = expand_paths_reference(*args)
    assert status == EXPANDED and mixed
    assert canonical_paths(message, weight, indptr, links) == [
        (0, (0, 2), 1 / 3), (0, (1, 3), 1 / 3), (0, (4,), 1 / 3), (1, (), 1.0)]
    # a cycle of next hops (node 0 -> switch 2 -> node 0 ...) never reaches NPU 1
    hop_ptr = np.array([0, 0, 1, 1, 1, 1, 2])       # slots (node, dst): (0, 1) and (2, 1)
    cycle = (hop_ptr, np.array([0, 1]), np.array([2, 0]), 2, np.array([0]), np.array([1]),
             False, np.array([0]), 4)
    assert expand_paths_reference(*cycle)[5] == NO_CONVERGENCE
