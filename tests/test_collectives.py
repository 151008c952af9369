"""Collectives end to end: closed forms per algorithm, both models, chunking, composition,
byte conservation, and bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flowsim
from conftest import block, pure, ring
from flowsim.errors import ConfigError
from flowsim.results import from_attrs
from flowsim.units import NETWORK_GBPS_TO_BYTES_PER_NS as GB

N = 1 << 24  # 16 MiB
B = 50 * GB  # bytes/ns of a 50 "GB/s" link
L = 500.0
MODELS = ("analytical", "flow")


def time_of(network, collective, size=N, system=None, model="analytical", **kw):
    return float(flowsim.simulate_collective(network, collective, size, system or pure(),
                                             model=model, **kw).time_ns)


def system_with(algorithm, **overrides):
    keys = ("all-reduce-implementation", "reduce-scatter-implementation",
            "all-gather-implementation", "all-to-all-implementation",
            "broadcast-implementation", "reduce-implementation")
    return pure(**{k: [algorithm] for k in keys}, **overrides)


HOPS = {"Ring": 1, "FullyConnected": 1, "Switch": 2}


# ---------------------------------------------------------------- closed forms, one dimension
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("topology", ["Ring", "FullyConnected", "Switch"])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_ring_all_reduce_textbook(topology, p, model):
    h = HOPS[topology]
    expected = 2 * (p - 1) / p * N / B + 2 * (p - 1) * h * L
    assert time_of(block(topology, p), "all_reduce", model=model) == pytest.approx(expected,
                                                                                   rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("collective,steps,frac", [
    ("reduce_scatter", lambda p: p - 1, lambda p: 1 / p),
    ("all_gather", lambda p: p - 1, lambda p: 1.0),       # N is each NPU's input
    ("all_to_all", lambda p: p * (p - 1) // 2, lambda p: 1 / p),
    ("broadcast", lambda p: p - 1, lambda p: 1.0),
    ("reduce", lambda p: p - 1, lambda p: 1.0),
])
def test_ring_other_collectives(collective, steps, frac, model):
    p = 6
    expected = steps(p) * (frac(p) * N / B + L)
    assert time_of(ring(p), collective, model=model) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("topology", ["Ring", "FullyConnected", "Switch"])
def test_direct_analytical_closed_forms(topology):
    p = 8
    hmax = {"Ring": p // 2, "FullyConnected": 1, "Switch": 2}[topology]
    one_round = hmax * L + N / p / B
    net, sys = block(topology, p), system_with("direct")
    assert time_of(net, "reduce_scatter", system=sys) == pytest.approx(one_round)
    assert time_of(net, "all_to_all", system=sys) == pytest.approx(one_round)
    assert time_of(net, "all_reduce", system=sys) == pytest.approx(2 * one_round)
    assert time_of(net, "all_gather", system=sys) == pytest.approx(hmax * L + N / B)


def test_direct_flow_model_sees_contention():
    p, sys = 8, system_with("direct")
    # FullyConnected: every message has its own link, nothing is shared
    fc = block("FullyConnected", p)
    assert time_of(fc, "all_to_all", system=sys, model="flow") == \
        pytest.approx(time_of(fc, "all_to_all", system=sys))
    # Switch: p-1 messages leave through one uplink
    sw = block("Switch", p)
    assert time_of(sw, "all_to_all", system=sys, model="flow") == \
        pytest.approx((p - 1) * N / p / B + 2 * L)
    # Ring: multi-hop messages share links, strictly slower than congestion-unaware
    r = ring(p)
    assert time_of(r, "all_to_all", system=sys, model="flow") > \
        1.5 * time_of(r, "all_to_all", system=sys)


@pytest.mark.parametrize("model", MODELS)
def test_halving_doubling_closed_form(model):
    p, k = 8, 3
    sys = system_with("halvingDoubling")
    fc = block("FullyConnected", p)
    rs = sum(N / 2**i / B + L for i in range(1, k + 1))
    ag = sum(2**i * N / p / B + L for i in range(k))
    assert time_of(fc, "reduce_scatter", system=sys, model=model) == pytest.approx(rs)
    assert time_of(fc, "all_gather", size=N // p, system=sys, model=model) == \
        pytest.approx(ag)
    assert time_of(fc, "all_reduce", system=sys, model=model) == \
        pytest.approx(2 * (p - 1) / p * N / B + 2 * k * L)
    # on a ring, partners at distance 2^i are min(2^i, p - 2^i) hops away
    hops = sum(min(2**i, p - 2**i) for i in range(k))
    assert time_of(ring(p), "reduce_scatter", system=sys) == \
        pytest.approx(sum(N / 2**i / B for i in range(1, k + 1)) + hops * L)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("p", [2, 4, 16])
def test_double_binary_tree_closed_form(p, model):
    # one chunk, no delays: d levels up and d down, the whole buffer per message
    d = int(math.log2(p))
    sys = system_with("doubleBinaryTree")
    fc = block("FullyConnected", p)
    assert time_of(fc, "all_reduce", system=sys, model=model) == \
        pytest.approx(2 * d * (N / B + L))


def test_double_binary_tree_pipelines_chunks_per_npu():
    # ASTRA-sim's closed form (validation README, checked there on 27 rows): with S chunks,
    # a chunk enters the tree on an NPU as soon as that NPU is done with the previous one.
    p, S, ed, mem = 8, 4, 10.0, 1600.0
    sys = system_with("doubleBinaryTree", **{"preferred-dataset-splits": S,
                                             "endpoint-delay": ed, "local-mem-bw": mem})
    c = (1 << 20) / S
    red = 3 * math.floor(c / mem)
    a = ed + red
    d = 3
    D = c / B + L  # FullyConnected: every edge costs the same
    period = (2 * d - 1) * (D + a) + ed
    expected = S * period + D + ed
    got = time_of(block("FullyConnected", p), "all_reduce", size=1 << 20, system=sys)
    assert got == pytest.approx(expected, rel=1e-12)


def test_tree_on_reduce_scatter_runs_a_full_all_reduce_with_a_warning():
    sys = system_with("doubleBinaryTree")
    with pytest.warns(flowsim.FlowsimWarning, match="runs as a full-size tree all-reduce"):
        rs = time_of(ring(8), "reduce_scatter", system=sys)
    assert rs == pytest.approx(time_of(ring(8), "all_reduce", system=sys))


@pytest.mark.parametrize("model", MODELS)
def test_direct_and_tree_broadcast_reduce(model):
    p = 8
    fc = block("FullyConnected", p)
    assert time_of(fc, "broadcast", system=system_with("direct"), model=model, root=3) == \
        pytest.approx(N / B + L)
    assert time_of(fc, "reduce", system=system_with("halvingDoubling"), model=model,
                   root=5) == pytest.approx(3 * (N / B + L))


@pytest.mark.parametrize("model", MODELS)
def test_send_recv(model):
    ds = flowsim.simulate_collective(ring(8), "send-recv", N, pure(), model=model, src=1, dst=4)
    assert float(ds.time_ns) == pytest.approx(N / B + 3 * L)
    assert ds.npu_finish_ns.values[[1, 4]].tolist() == [float(ds.time_ns)] * 2


# ---------------------------------------------------------------- system settings
def test_astra_sim_ring_formula_with_chunks_and_delays():
    # validation README (A): T = S [ s floor(hL + m/B) + (s+1) ed + r red(m) ], here exact
    p, S, ed, mem = 8, 4, 10.0, 1600.0
    sys = {"preferred-dataset-splits": S, "endpoint-delay": ed, "local-mem-bw": mem,
           "active-chunks-per-dimension": 1}
    size = 1 << 30
    m = size / S / p
    red = 3 * math.floor(m / mem)
    s, r = 2 * (p - 1), p - 1
    expected = S * (s * (L + m / B) + (s + 1) * ed + r * red)
    assert time_of(ring(p), "all_reduce", size, sys) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_active_chunks_overlap_in_analytical_model_share_in_flow_model(k):
    sys = pure(**{"preferred-dataset-splits": 4, "active-chunks-per-dimension": k})
    one = time_of(ring(8), "all_reduce", system=pure(**{"preferred-dataset-splits": 4}))
    analytical = time_of(ring(8), "all_reduce", system=sys)
    flow = time_of(ring(8), "all_reduce", system=sys, model="flow")
    assert analytical == pytest.approx(one / k, rel=1e-9)  # no sharing: k times faster
    # the flow model cannot beat the bandwidth bound 2 (p-1)/p N / B
    assert flow >= 2 * 7 / 8 * N / B * (1 - 1e-9)
    assert flow == pytest.approx(2 * 7 / 8 * N / B + 2 * 7 * 4 / k * L, rel=0.05)


def test_local_bw_aware_and_baseline_composition():
    net = {"topology": ["Ring", "Ring"], "npus_count": [4, 3], "bandwidth": [100, 25],
           "latency": [100, 1000]}
    b0, b1 = 100 * GB, 25 * GB
    rs0 = 3 * (N / 4 / b0 + 100)
    ar1 = 2 * 2 * (N / 12 / b1 + 1000)
    assert time_of(net, "all_reduce", system=pure(**{"all-reduce-implementation":
                                                     ["ring", "ring"]})) == \
        pytest.approx(rs0 + ar1 + rs0)
    base = pure(**{"collective-optimization": "baseline",
                   "all-reduce-implementation": ["ring", "ring"]})
    full0 = 2 * 3 * (N / 4 / b0 + 100)
    full1 = 2 * 2 * (N / 3 / b1 + 1000)
    assert time_of(net, "all_reduce", system=base) == pytest.approx(full0 + full1)
    # involved dims: only dimension 1
    assert time_of(net, "all_reduce", system=base, dims=[1]) == pytest.approx(full1)


def test_in_network_reduction_sends_up_once():
    inr = {"topology": ["Switch"], "npus_count": [16], "bandwidth": [50], "latency": [500],
           "in_network_reduction": [True]}
    for model in MODELS:
        assert time_of(inr, "all_reduce", model=model) == pytest.approx(N / B + 2 * L)


def test_barrier_and_per_npu_agree_when_symmetric():
    for algorithm in ("ring", "direct", "halvingDoubling"):
        for model in MODELS:
            a = time_of(ring(8), "all_reduce", system=system_with(
                algorithm, **{"preferred-dataset-splits": 3, "endpoint-delay": 10}),
                model=model)
            b = time_of(ring(8), "all_reduce", system=system_with(
                algorithm, **{"preferred-dataset-splits": 3, "endpoint-delay": 10,
                              "step-synchronization": "per_npu"}), model=model)
            assert a == pytest.approx(b, rel=1e-12), (algorithm, model)


# ---------------------------------------------------------------- conservation, coverage
@pytest.mark.parametrize("model", MODELS)
def test_bytes_are_conserved_with_remainders(model):
    size = 1_000_003  # prime: divides neither among 7 chunks nor among 8 ranks
    sys = pure(**{"preferred-dataset-splits": 7})
    ds = flowsim.simulate_collective(ring(8), "all_reduce", size, sys, model=model)
    # every NPU sends 2 (p-1) blocks of size/p, each over one link
    assert float(ds.link_bytes.sum()) == pytest.approx(2 * 7 * size, rel=1e-12)
    # and each link of the ring carries its share: 2 (p-1)/p of the size
    np.testing.assert_allclose(ds.link_bytes.values[:8], 2 * 7 / 8 * size, rtol=1e-12)


ALGORITHMS = ["ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing",
              "oneDirect", "oneHalvingDoubling"]
TYPES = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]


def _supported(algorithm, collective):
    if "alvingDoubling" in algorithm and collective == "all_to_all":
        return False
    return True


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("collective", TYPES)
@pytest.mark.parametrize("topology", ["Ring", "FullyConnected", "Switch", "2d"])
def test_every_combination_runs_under_both_models(algorithm, collective, topology):
    if topology == "2d":
        net = {"topology": ["Ring", "Switch"], "npus_count": [4, 2], "bandwidth": [50, 25],
               "latency": [100, 700]}
    else:
        net = block(topology, 8)
    dims = 2 if topology == "2d" else 1
    name = algorithm if algorithm.startswith("one") else [algorithm] * dims
    keys = {c: f"{c.replace('_', '-')}-implementation" for c in TYPES}
    sys = pure(**{keys[collective]: name if isinstance(name, list) else [name],
                  "preferred-dataset-splits": 2, "endpoint-delay": 5})
    if not _supported(algorithm, collective):
        with pytest.raises(ConfigError, match="does not implement"):
            time_of(net, collective, system=sys)
        return
    with np.errstate(all="raise"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flowsim.FlowsimWarning)
            times = {m: flowsim.simulate_collective(net, collective, N, sys, model=m, root=1)
                     for m in MODELS}
    for ds in times.values():
        assert float(ds.time_ns) > 0
        assert np.isfinite(ds.npu_finish_ns).all()
        assert float(ds.link_bytes.sum()) > 0
    # congestion can only slow things down (flat algorithms: the analytical model charges
    # only the lowest dimension, as ASTRA-sim does, so it is a lower bound as well)
    assert float(times["flow"].time_ns) >= float(times["analytical"].time_ns) * (1 - 1e-9)


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("system,match", [
    ({"all-reduce-implementation": ["ring", "ring"]}, "expected 1 algorithm names"),
    ({"all-reduce-implementation": ["bogus"]}, r"all-reduce-implementation\[0\]'"),
    ({"preferred-dataset-splits": 0}, "preferred-dataset-splits"),
    ({"active-chunks-per-dimension": -1}, "active-chunks-per-dimension"),
    ({"endpoint-delay": "slow"}, "endpoint-delay"),
    ({"collective-optimization": "fast"}, "collective-optimization"),
    ({"step-synchronization": "sometimes"}, "step-synchronization"),
    ({"ring-delays": "nccl"}, r"ring-delays.*per_dimension, flat"),
    ({"all-reduce-implementation": ["oneRing", "ring"]}, "single flat algorithm"),
])
def test_bad_system_configs(system, match):
    with pytest.raises(ConfigError, match=match):
        time_of(ring(8), "all_reduce", system=system)


def test_unsupported_algorithm_sizes_are_refused():
    with pytest.raises(ConfigError, match="power-of-two"):
        time_of(ring(6), "all_reduce", system=system_with("halvingDoubling"))
    with pytest.raises(ConfigError, match="power-of-two"):
        time_of(ring(6), "all_reduce", system=system_with("doubleBinaryTree"))
    with pytest.raises(ConfigError, match="does not implement all-to-all"):
        time_of(ring(8), "all_to_all", system=system_with("halvingDoubling"))


@pytest.mark.parametrize("kwargs,match", [
    ({"collective": "allreduce-ish"}, "'collective'"),
    ({"size": 0}, "'size'"),
    ({"size": "12 parsecs"}, "'size'"),
    ({"size": -5}, "'size'"),
    ({"size": 1.5}, "'size'"),
    ({"model": "quantum"}, "'model'"),
    ({"dims": [3]}, "'dims'"),
    ({"root": 8}, "'root'"),
    ({"collective": "send_recv", "src": 0, "dst": 99}, "'dst'"),
])
def test_bad_arguments(kwargs, match):
    args = {"collective": "all_reduce", "size": N, "model": "analytical"}
    args.update(kwargs)
    collective, size, model = args.pop("collective"), args.pop("size"), args.pop("model")
    with pytest.raises(ConfigError, match=match):
        flowsim.simulate_collective(ring(8), collective, size, pure(), model=model, **args)


def test_unknown_system_keys_warn_and_unmodelled_keys_say_so():
    with pytest.warns(flowsim.FlowsimWarning, match="unknown system key 'colour'"):
        flowsim.load_system({"colour": 1})
    with pytest.warns(flowsim.FlowsimWarning, match="'L' = 5 is not modelled"):
        flowsim.load_system({"L": 5})
    with pytest.warns(flowsim.FlowsimWarning, match="ignored without 'model-shared-bus: 1'"):
        flowsim.load_system({"local-reduction-delay": 3})
    assert flowsim.load_system({"local-reduction-delay": 3,
                                "model-shared-bus": 1}).local_reduction_delay_ns == 3


def test_one_algorithm_for_several_dimensions_warns():
    net = {"topology": ["Ring", "Ring"], "npus_count": [4, 2], "bandwidth": [1, 1],
           "latency": [1, 1]}
    with pytest.warns(flowsim.FlowsimWarning, match="using 'ring' in every dimension"):
        time_of(net, "all_reduce", system={"all-reduce-implementation": ["ring"]})


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("collective,algorithm", [
    (c, a) for c in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
    for a in ("ring", "direct", "halvingDoubling")
    if not (a == "halvingDoubling" and c == "all_to_all")])
def test_simulating_one_group_per_dimension_is_exact(model, collective, algorithm):
    net = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [4, 2, 4],
           "bandwidth": [200, 100, 50], "latency": [100, 200, 500]}
    keys = {c: f"{c.replace('_', '-')}-implementation" for c in TYPES}
    sys = pure(**{keys[collective]: [algorithm] * 3, "preferred-dataset-splits": 3,
                  "active-chunks-per-dimension": 2, "endpoint-delay": 7,
                  "local-mem-bw": 1000})
    fast = flowsim.simulate_collective(net, collective, N, sys, model=model)
    full = flowsim.simulate_collective(net, collective, N, sys, model=model, symmetry=False)
    assert float(fast.time_ns) == float(full.time_ns)
    np.testing.assert_allclose(fast.link_bytes, full.link_bytes, rtol=1e-12)
    np.testing.assert_allclose(fast.link_busy_ns, full.link_busy_ns, rtol=1e-9, atol=1e-6)
    np.testing.assert_array_equal(fast.npu_finish_ns, full.npu_finish_ns)
    fast_stats, full_stats = from_attrs(fast.attrs), from_attrs(full.attrs)
    assert fast_stats.flows == full_stats.flows
    assert fast_stats.simulated_flows < full_stats.simulated_flows


@pytest.mark.parametrize("model", MODELS)
def test_explicit_group(model):
    ds = flowsim.simulate_collective(ring(8), "all_reduce", N, pure(), model=model,
                                     group=[0, 2, 4, 6])
    # a ring over every second NPU: each step crosses two ring links
    assert float(ds.time_ns) == pytest.approx(6 * (N / 4 / B + 2 * L))
    assert float(ds.npu_finish_ns[1]) == 0.0  # not in the group
    for bad in ([0], [0, 0], [0, 9], "all"):
        with pytest.raises(ConfigError, match="'group'"):
            flowsim.simulate_collective(ring(8), "all_reduce", N, pure(), group=bad)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("policy", ["LIFO", "FIFO"])
def test_scheduling_policy_orders_collectives_waiting_for_a_dimension(policy, model):
    from flowsim.system.phases import collective_phases
    from flowsim.system.scheduler import Schedule

    net = flowsim.load_network(ring(8))
    system = flowsim.load_system(pure(**{"scheduling-policy": policy}))
    schedule = Schedule(net, system, model)
    first = schedule.issue([collective_phases(net, system, "all_reduce", N)])
    second = schedule.issue([collective_phases(net, system, "all_reduce", N)])
    schedule.run()
    one = 2 * 7 / 8 * N / B + 14 * L
    early, late = (second, first) if policy == "LIFO" else (first, second)
    assert schedule.ledger.collective_end[early] == pytest.approx(one)
    assert schedule.ledger.collective_end[late] == pytest.approx(2 * one)


def test_queues_freed_together_admit_in_the_order_they_were_first_used():
    """Two dimensions' queues each hold a waiting collective when their running ones end at
    the same instant: the queue used first starts first (the order admission has always
    visited them in, so a run's events, and its bits, do not change), and no queue is left
    marked as holding chunks."""
    from flowsim.system.phases import collective_phases
    from flowsim.system.scheduler import Schedule

    net = flowsim.load_network({"topology": ["Ring", "Ring"], "npus_count": [4, 4],
                                "bandwidth": [50, 50], "latency": [500, 500]})
    system = flowsim.load_system(pure(**{"all-reduce-implementation": ["ring", "ring"]}))
    schedule = Schedule(net, system, "analytical", trace=True)

    def on(dim):
        return [collective_phases(net, system, "all_reduce", N, dims=(dim,))]

    schedule.issue(on(0))           # queue of dim 0 first used here
    schedule.issue(on(1))           # then dim 1's; both run, equally long
    schedule.issue(on(1))           # waits on dim 1
    schedule.issue(on(0))           # waits on dim 0
    schedule.run()
    starts = [(e["start"], e["dims"]) for e in schedule.trace_log if e["step"] == 0]
    assert [dims for _, dims in starts] == [(0,), (1,), (0,), (1,)]
    assert starts[2][0] == starts[3][0] > 0   # released together, dim 0's queue first
    assert not schedule._nonempty and schedule._waiting == 0


@pytest.mark.parametrize("model", MODELS)
def test_per_npu_busy_time_and_a_broadcast_root_that_only_sends(model):
    net = {"topology": ["Ring", "Ring"], "npus_count": [4, 2], "bandwidth": [50, 50],
           "latency": [500, 500]}
    per_npu = {"step-synchronization": "per_npu", "endpoint-delay": 10,
               "all-reduce-implementation": ["ring", "ring"],
               "broadcast-implementation": ["ring", "ring"]}
    ds = flowsim.simulate_collective(net, "all_reduce", N, per_npu, model=model)
    barrier = flowsim.simulate_collective(net, "all_reduce", N,
                                          {**per_npu, "step-synchronization": "barrier"},
                                          model=model)
    assert np.all(ds.dim_busy_ns.values > 0)
    np.testing.assert_allclose(ds.dim_busy_ns, barrier.dim_busy_ns, rtol=1e-9)
    # the root of a chain broadcast only sends: with one chunk in flight per dimension its
    # chunks must not overlap on its link, so splitting cannot beat the bandwidth bound
    one = pure(**{"step-synchronization": "per_npu", "broadcast-implementation": ["ring"]})
    four = {**one, "preferred-dataset-splits": 4}
    t1 = time_of(ring(4), "broadcast", system=one, model=model)
    t4 = time_of(ring(4), "broadcast", system=four, model=model)
    assert t4 >= N / B
    assert t4 < t1  # pipelining through the chain still helps


def test_more_bad_arguments_and_in_network_reduction_on_one_group():
    with pytest.raises(ConfigError, match="'root'"):
        flowsim.simulate_collective(ring(8), "broadcast", N, pure(), group=[0, 2], root=1)
    with pytest.raises(ConfigError, match="'group' and 'dims'"):
        flowsim.simulate_collective(ring(8), "all_reduce", N, pure(), group=[0, 2], dims=[0])
    with pytest.raises(ConfigError, match="'dst'"):
        flowsim.simulate_collective(ring(8), "send_recv", N, pure(), src=3, dst=3)
    with pytest.raises(ConfigError, match="'root'"):
        flowsim.estimate(ring(8), "broadcast", N, pure(), root=99)
    with pytest.raises(ConfigError, match="preferred-dataset-splits"):
        flowsim.load_system({"preferred-dataset-splits": float("nan")})
    with pytest.raises(ConfigError, match="string keys"):
        flowsim.load_system({1: 2})
    inr = {"topology": ["Ring", "Switch"], "npus_count": [2, 4], "bandwidth": [50, 50],
           "latency": [500, 500], "in_network_reduction": [False, True]}
    two = pure(**{"all-reduce-implementation": ["ring", "ring"]})
    fast = flowsim.simulate_collective(inr, "all_reduce", N, two, model="flow")
    full = flowsim.simulate_collective(inr, "all_reduce", N, two, model="flow",
                                       symmetry=False)
    assert float(fast.time_ns) == float(full.time_ns)
    np.testing.assert_allclose(fast.link_bytes, full.link_bytes)
    assert from_attrs(fast.attrs).simulated_flows < from_attrs(full.attrs).simulated_flows
