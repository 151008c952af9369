"""The flow model on the quotient of a run's symmetries (:mod:`flowsim.system.quotient`) gives
the run every flow gives: per-NPU times, per-layer breakdown and per-dimension traffic, on
switched, fully connected and ring dimensions, with tensor, context, expert, data and
pipeline parallelism; a step a shift does not map onto itself (halving-doubling) makes the run
start again without that shift, with the same result; runs without the symmetry (per-NPU
speeds, one program per NPU, a routed fabric) find none."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.system import quotient as quotient_module
from flowsim.system import workload_engine
from flowsim.workload.graph import Op, Program, Workload

SMALL = {"generator": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 4,
         "sequence": 2048, "micro_batch": 1, "vocab": 32000, "gated_mlp": True,
         "distributed_optimizer": True, "overlap_grad_reduce": True,
         "overlap_param_gather": True}
CLUSTER = {"cluster": {"device": "h100", "nodes": 4, "gpus_per_node": 4}}


def _spec(tp=1, cp=1, pp=1, dp=1, **more) -> dict:
    return {**SMALL, "tp": tp, "cp": cp, "pp": pp, "dp": dp,
            "global_batch": 2 * pp * dp, **more}


def _runs(monkeypatch, network, spec, system="nccl"):
    """The flow model's record on the quotient and with every flow, and the dimensions the
    quotient run kept (``None``: none)."""
    found = []

    def spy(*args, **kwargs):
        q = quotient_module.find_quotient(*args, **kwargs)
        found.append(None if q is None else q.dims)
        return q

    monkeypatch.setattr(workload_engine, "find_quotient", spy)
    reduced = flowsim.run_training(network, spec, system, model="flow").record
    every = flowsim.run_training(network, spec, system, model="flow", symmetry=False).record
    return reduced, every, found


def _assert_same(reduced, every) -> None:
    for field in dataclasses.fields(every):
        a, b = getattr(reduced, field.name), getattr(every, field.name)
        if isinstance(b, np.ndarray) and b.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-6, err_msg=field.name)
    assert reduced.time_ns == pytest.approx(every.time_ns, rel=1e-12)
    # the quotient times fewer flows and stands for all of them
    assert reduced.stats.flows == every.stats.flows
    assert reduced.stats.simulated_flows < every.stats.simulated_flows


def test_a_cluster_run_on_its_quotient_is_the_run(monkeypatch):
    reduced, every, found = _runs(monkeypatch, CLUSTER, _spec(tp=2, cp=2, pp=2, dp=2))
    _assert_same(reduced, every)
    assert found[-1] is not None and len(found[-1]) == 3   # tp, cp, dp; not pp


def test_experts_over_ring_and_fully_connected_dimensions(monkeypatch):
    """All-to-alls over a ring take several hops: a path crosses two links of one orbit, whose
    representative it loads twice."""
    for kind in ("Ring", "FullyConnected", "Switch"):
        net = {"topology": [kind, "Switch"], "npus_count": [4, 4], "bandwidth": [100, 25],
               "latency": [500, 2000]}
        spec = _spec(dp=8, pp=2, ep=4, experts=4, top_k=2, moe_ffn=1024)
        reduced, every, found = _runs(monkeypatch, net, spec)
        _assert_same(reduced, every)
        assert found[-1] is not None


@pytest.mark.parametrize("net, spec", [
    # switches reducing in the network (SHARP-like): a step's messages go up and come back
    ({"topology": ["Switch", "Switch"], "npus_count": [4, 8], "bandwidth": [100, 25],
      "latency": [500, 2000], "in_network_reduction": [True, True]}, _spec(tp=4, dp=4, pp=2)),
    # groups that straddle a dimension (data parallelism of 6 over 8 x 3)
    ({"topology": ["Switch", "Switch"], "npus_count": [8, 3], "bandwidth": [100, 25],
      "latency": [500, 2000]}, _spec(tp=2, dp=6, pp=2)),
    # a ring of two, and a ring cut into pieces
    ({"topology": ["Ring", "Switch"], "npus_count": [2, 8], "bandwidth": [100, 25],
      "latency": [500, 2000]}, _spec(tp=2, dp=4, pp=2)),
    ({"topology": ["Ring", "Switch"], "npus_count": [8, 2], "bandwidth": [100, 25],
      "latency": [500, 2000]}, _spec(tp=2, dp=4, pp=2)),
    # a ring whose context-parallel exchanges a shift maps onto the right pairs but other
    # paths (ties go one way round): only the paths' check refuses that shift
    ({"topology": ["Ring", "Switch"], "npus_count": [4, 4], "bandwidth": [150, 25],
      "latency": [500, 3000]}, _spec(cp=2, dp=8)),
], ids=["in-network", "straddling", "ring-of-2", "ring-pieces", "ring-paths"])
def test_other_networks_on_their_quotient(monkeypatch, net, spec):
    reduced, every, found = _runs(monkeypatch, net, spec)
    _assert_same(reduced, every)
    assert found[-1] is not None


def test_per_npu_speeds_keep_the_shifts_they_allow(monkeypatch):
    """Every odd tensor-parallel rank slower: the tensor-parallel shift is not a symmetry,
    the context- and data-parallel ones are."""
    net = {"topology": ["Switch", "Switch"], "npus_count": [4, 8], "bandwidth": [100, 25],
           "latency": [500, 2000]}
    speed = np.where(np.arange(32) % 2 == 1, 0.8, 1.0)
    spec = _spec(tp=2, cp=2, dp=4, pp=2)
    found = []
    monkeypatch.setattr(workload_engine, "find_quotient", lambda *a, **k: found.append(
        quotient_module.find_quotient(*a, **k)) or found[-1])
    reduced = flowsim.run_training(net, spec, "nccl", model="flow", speed=speed).record
    every = flowsim.run_training(net, spec, "nccl", model="flow", speed=speed,
                                 symmetry=False).record
    assert found[-1] is not None and 0 not in found[-1].dims
    _assert_same(reduced, every)


def test_systems_that_need_every_flow_skip_the_quotient(monkeypatch):
    """Trees without a phase barrier run as per-NPU DAGs: no quotient is looked for."""
    calls = []
    monkeypatch.setattr(workload_engine, "find_quotient",
                        lambda *a, **k: calls.append(a) or None)
    tree = {"all-reduce-implementation": ["doubleBinaryTree"] * 2,
            "reduce-scatter-implementation": ["ring"] * 2,
            "all-gather-implementation": ["ring"] * 2,
            "all-to-all-implementation": ["direct"] * 2, "endpoint-delay": 7000}
    flowsim.run_training(CLUSTER, _spec(tp=2, dp=8), tree, model="flow")
    assert calls == []
    flowsim.run_training(CLUSTER, _spec(tp=2, dp=8), "nccl", model="flow")
    assert len(calls) == 1


def test_a_step_no_shift_maps_onto_itself_starts_the_run_again(monkeypatch):
    system = {"all-reduce-implementation": "halvingDoubling",
              "reduce-scatter-implementation": "halvingDoubling",
              "all-gather-implementation": "halvingDoubling",
              "active-chunks-per-dimension": 1, "endpoint-delay": 7000}
    net = {"topology": ["Switch", "Switch"], "npus_count": [4, 8], "bandwidth": [100, 25],
           "latency": [500, 2000]}
    reduced, every, found = _runs(monkeypatch, net, _spec(tp=4, pp=2, dp=4), system)
    # every shift a step breaks is dropped at once (here the data-parallel step breaks the
    # data-parallel shift, a later tensor-parallel step the tensor-parallel one)
    assert found == [(0, 1), (0,), None]
    for field in dataclasses.fields(every):
        b = getattr(every, field.name)
        if isinstance(b, np.ndarray) and b.dtype.kind == "f":
            np.testing.assert_allclose(getattr(reduced, field.name), b, rtol=1e-9, atol=1e-6)


def test_runs_without_the_symmetry_find_none():
    net = flowsim.load_network(CLUSTER)
    work = flowsim.load_workload(_spec(tp=2, dp=8), net)
    view = net if work.network is None else work.network
    even = np.ones(net.npus)
    assert quotient_module.find_quotient(view, work, even) is not None
    slow = even.copy()
    slow[3] = 0.5   # one slow GPU: every shift moves it onto a GPU of the other speed
    assert quotient_module.find_quotient(view, work, slow) is None
    ranks = Workload([Program([Op(id=0, kind="compute", duration_ns=1.0)], np.array([n]),
                              f"rank {n}") for n in range(net.npus)], [], "traces")
    assert quotient_module.find_quotient(net, ranks, even) is None
    fabric = flowsim.load_network({"cluster": {**CLUSTER["cluster"], "form": "fabric"}})
    on_fabric = flowsim.load_workload(_spec(tp=2, dp=8), fabric)
    fabric_view = fabric if on_fabric.network is None else on_fabric.network
    assert quotient_module.find_quotient(fabric_view, on_fabric, even) is None


def test_the_switches_are_checked_at_the_edge():
    for call in (lambda: flowsim.simulate(CLUSTER, _spec(dp=16), model="flow", symmetry="no"),
                 lambda: flowsim.simulate(CLUSTER, _spec(dp=16), model="flow", replay=1),
                 lambda: flowsim.simulate_collective(CLUSTER, "all_reduce", "1MiB",
                                                     symmetry="off")):
        with pytest.raises(flowsim.ConfigError, match="argument.*(symmetry|replay).*true or "
                                                      "false"):
            call()


def test_a_shift_that_breaks_the_network_is_not_taken():
    """Ring dimensions of different bandwidths: shifting across them maps links onto links
    of another bandwidth."""
    net = flowsim.load_network({"topology": ["Ring", "Ring"], "npus_count": [4, 4],
                                "bandwidth": [100, 25], "latency": [500, 2000]})
    keys = quotient_module._LinkKeys(net)
    npus = np.arange(net.npus)
    within = (npus // 4) * 4 + (npus % 4 + 1) % 4   # along dim 0: an automorphism
    assert keys.image(within) is not None
    swap = (npus % 4) * 4 + npus // 4                # transposes the dims: not one
    assert keys.image(swap) is None


DEGREES = st.sampled_from([(tp, cp, pp, dp) for tp in (1, 2, 4) for cp in (1, 2)
                           for pp in (1, 2) for dp in (1, 2, 4, 8) if tp * cp * pp * dp == 16])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(DEGREES, st.sampled_from(["Switch", "Ring", "FullyConnected"]), st.booleans())
def test_random_layouts_equal_every_flow(monkeypatch, degrees, kind, vpp):
    tp, cp, pp, dp = degrees
    net = {"topology": [kind, "Switch"], "npus_count": [4, 4], "bandwidth": [150, 25],
           "latency": [500, 3000]}
    spec = _spec(tp, cp, pp, dp, **({"vpp": 2} if vpp and pp > 1 else {}))
    reduced, every, found = _runs(monkeypatch, net, spec)
    assert found[-1] is not None   # every such layout has replicas to fold
    _assert_same(reduced, every)


def test_both_models_count_the_flows_a_run_stands_for():
    """``stats.flows``: every group's flows, under either model, however many are timed."""
    spec = _spec(tp=2, cp=2, pp=2, dp=2)
    stats = [flowsim.run_training(CLUSTER, spec, model=model, symmetry=symmetry).record.stats
             for model, symmetry in (("analytical", True), ("flow", True), ("flow", False))]
    assert stats[0].flows == stats[1].flows == stats[2].flows == stats[2].simulated_flows
    assert stats[0].simulated_flows < stats[0].flows   # one group per dimension timed
    assert stats[1].simulated_flows < stats[1].flows   # one flow per orbit timed


def test_a_traced_run_takes_the_quotient_too(monkeypatch, tmp_path):
    """A timeline keeps op times per program: tracing changes nothing the quotient does."""
    found = []
    monkeypatch.setattr(workload_engine, "find_quotient", lambda *a, **k: found.append(
        quotient_module.find_quotient(*a, **k)) or found[-1])
    spec = _spec(tp=2, cp=2, pp=2, dp=2)
    traced = flowsim.run_training(CLUSTER, spec, model="flow", trace=tmp_path / "t.json").record
    assert found and found[-1] is not None and (tmp_path / "t.json").stat().st_size > 0
    every = flowsim.run_training(CLUSTER, spec, model="flow", symmetry=False).record
    _assert_same(traced, every)
