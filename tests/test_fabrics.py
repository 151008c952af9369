"""Fabrics: graphs, generators, ECMP / hash routing, logical dims, failures, bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowsim
from flowsim.errors import ConfigError, RoutingError
from flowsim.units import NETWORK_GBPS_TO_BYTES_PER_NS as GB

N = 1 << 24
DIRECT = {"preferred-dataset-splits": 1, "endpoint-delay": 0,
          "all-to-all-implementation": ["direct", "direct"],
          "all-reduce-implementation": ["ring", "ring"]}


DIRECT_1D = {**DIRECT, "all-to-all-implementation": ["direct"],
             "all-reduce-implementation": ["ring"]}


def pod(ratio: float, hosts: int = 2, rails: bool = False, routing: str = "ecmp",
        per_leaf: int = 1) -> dict:
    return {"fabric": {"generator": "leaf_spine", "hosts": hosts, "npus_per_host": 4,
                       "scale_up": {"bandwidth": 400, "latency": 100},
                       "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": per_leaf,
                       "rail_optimized": rails, "oversubscription": ratio,
                       "routing": routing}}


def test_oversubscription_slows_the_flow_model_only():
    # all-to-all between the two hosts' matching GPUs (logical dim 1): all traffic crosses
    # the spines; at 4:1 a leaf has one uplink for its four NICs
    times = {}
    for ratio in (1, 4):
        for model in ("analytical", "flow"):
            ds = flowsim.simulate_collective(pod(ratio), "all_to_all", N, DIRECT, model=model,
                                             dims=[1])
            times[ratio, model] = float(ds.time_ns)
    assert times[4, "analytical"] == times[1, "analytical"]
    message = N / 2 / (50 * GB)
    latency = 4 * 500
    assert times[1, "flow"] == pytest.approx(message + latency)
    assert times[4, "flow"] == pytest.approx(4 * message + latency)


def test_ecmp_spreads_load_evenly_on_a_symmetric_clos():
    net = {"fabric": {"generator": "leaf_spine", "hosts": 8, "npus_per_host": 1,
                      "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 4,
                      "oversubscription": 1}}
    ds = flowsim.simulate_collective(net, "all_to_all", N, DIRECT_1D, model="flow")
    network = flowsim.load_network(net)
    names = np.array(network.config.link_names)
    up = np.array([n.startswith("leaf") and "->spine" in n for n in names])
    loads = ds.link_bytes.values[up]
    assert loads.size == 8 and np.all(loads > 0)
    np.testing.assert_allclose(loads, loads[0], rtol=1e-12)
    # hash routing puts every message on one path: some spine links carry more
    hashed = dict(net["fabric"], routing="hash")
    ds_hash = flowsim.simulate_collective({"fabric": hashed}, "all_to_all", N, DIRECT_1D,
                                          model="flow")
    assert float(ds_hash.time_ns) >= float(ds.time_ns)
    total = float(ds.link_bytes.sum())
    assert float(ds_hash.link_bytes.sum()) == pytest.approx(total)


def ring_of_switches(fail=None):
    fabric = {"npus": 4, "switches": ["s0", "s1", "s2", "s3"],
              "links": [[f"npu{i}", f"s{i}", 100, 100] for i in range(4)] +
                       [[f"s{i}", f"s{(i + 1) % 4}", 50, 500] for i in range(4)]}
    if fail:
        fabric["fail"] = fail
    return {"fabric": fabric}


def test_link_failure_reroutes_exactly_the_flows_that_crossed_it():
    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    healthy = flowsim.load_network(ring_of_switches())
    broken = flowsim.load_network(ring_of_switches(fail=["s0->s1"]))
    for net in (healthy, broken):
        assert net.npus == 4
    result = {}
    for name, net in (("healthy", healthy), ("broken", broken)):
        message, weight, indptr, links = net.routes_multipath(src, dst)
        result[name] = flowsim.simulate_flows(net.link_bandwidth, net.link_latency, indptr,
                                              links, N * weight, model="flow")
        result[name + "_hops"] = np.diff(indptr)
    assert result["healthy_hops"].tolist() == [3, 3, 3, 3]
    # 0 -> 1 now goes the long way round (5 hops) and shares s0->s3 ... with the others
    assert result["broken_hops"].tolist() == [5, 3, 3, 3]
    slowed = result["broken"].finish_ns > result["healthy"].finish_ns * (1 + 1e-9)
    assert slowed[0]
    assert result["broken"].finish_ns[0] > result["broken"].finish_ns[1]


def test_unreachable_pair_is_a_clear_error():
    cut = flowsim.load_network(ring_of_switches(fail=["s0->s1", "s0->s3"]))
    with pytest.raises(RoutingError, match="no path from npu0 to npu1"):
        cut.routes_multipath(np.array([0]), np.array([1]))


def test_degraded_link_and_rail_optimized_pod():
    slow = ring_of_switches()
    slow["fabric"]["degrade"] = {"s1->s2": 0.5}
    net = flowsim.load_network(slow)
    i = net.config.link_names.index("s1->s2")
    assert net.link_bandwidth[i] == pytest.approx(25 * GB)
    rails = flowsim.load_network(pod(1, hosts=4, rails=True, per_leaf=4))
    # NIC g of every host lands on leaf g: the same-rank GPUs of two hosts share a leaf
    message, weight, indptr, links = rails.routes_multipath(np.array([1]), np.array([5]))
    assert np.diff(indptr).tolist() == [2]


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all", "all_gather"])
def test_every_algorithm_runs_on_a_fabric(model, collective):
    for algorithm in ("ring", "direct", "halvingDoubling"):
        if algorithm == "halvingDoubling" and collective == "all_to_all":
            continue
        key = f"{collective.replace('_', '-')}-implementation"
        system = {**DIRECT, key: [algorithm, algorithm]}
        ds = flowsim.simulate_collective(pod(2, hosts=2), collective, N, system, model=model)
        assert float(ds.time_ns) > 0 and np.isnan(ds.dim_bytes).all()


def test_torus_fabric_matches_a_ring_network():
    # a 1-D torus fabric of 8 NPUs is the Ring block of the multi-dimensional notation
    torus = {"fabric": {"generator": "torus", "dims": [8], "bandwidth": 50, "latency": 500}}
    ring = {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50], "latency": [500]}
    system = {"preferred-dataset-splits": 2, "endpoint-delay": 10}
    for model in ("analytical", "flow"):
        a = flowsim.simulate_collective(torus, "all_reduce", N, system, model=model)
        b = flowsim.simulate_collective(ring, "all_reduce", N, system, model=model)
        assert float(a.time_ns) == pytest.approx(float(b.time_ns), rel=1e-12)


@pytest.mark.parametrize("fabric,match", [
    ({"npus": 2, "links": [["npu0", "nowhere", 1, 1]]}, r"fabric.links\[0\].dst"),
    ({"npus": 2, "links": [["npu0", "npu1", 0, 1]]}, r"fabric.links\[0\].bandwidth"),
    ({"npus": 2, "links": [["npu0", "npu1", -3, 1]]}, r"fabric.links\[0\].bandwidth"),
    ({"npus": 3, "links": [["npu0", "npu1", 1, 1]]}, "npu2 has no links"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "logical_dims": [3]},
     "fabric.logical_dims"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "routing": "random"}, "fabric.routing"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "fail": ["zzz"]}, r"fabric.fail\[0\]"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "colour": 1}, "fabric.colour"),
    ({"generator": "hypercube"}, "fabric.generator"),
    ({"generator": "leaf_spine", "hosts": 4, "npus_per_host": 1,
      "nic": {"bandwidth": 50}, "hosts_per_leaf": 2, "oversubscription": 3},
     "fabric.oversubscription"),
])
def test_bad_fabrics(fabric, match):
    with pytest.raises(ConfigError, match=match):
        flowsim.load_network({"fabric": fabric})


def test_batched_estimator_refuses_fabrics():
    with pytest.raises(ConfigError, match="multi-dimensional"):
        flowsim.estimate_batch(pod(1), "all_reduce", np.array([N]))


def test_cli_fail_and_degrade(capsys):

    from flowsim.cli import main

    base = ["collective", "--network", "dgx_pod_64_leafspine_4to1", "--collective",
            "all-to-all", "--size", "4MiB", "--model", "flow", "--json", "--system",
            "direct_4chunks_3d"]
    # the bundled 3-D system has three algorithm entries; the pod has two logical dims
    code = main(base)
    assert code == 2 and "expected 2 algorithm names" in capsys.readouterr().err
    base = base[:-2]
    assert main(base) == 0
    healthy = json.loads(capsys.readouterr().out)["time_ns"]
    assert main(base + ["--degrade", "leaf*->spine*=0.5"]) == 0
    degraded = json.loads(capsys.readouterr().out)["time_ns"]
    assert degraded > healthy
    assert main(base + ["--fail", "spine0"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ns"] > healthy
    assert main(base + ["--fail", "nothing-matches"]) == 2
    assert "fabric.fail[0]" in capsys.readouterr().err
    assert main(["collective", "--fail", "x"]) == 2
    assert "need a fabric network" in capsys.readouterr().err
    assert main(base + ["--degrade", "novalue"]) == 2
    assert "PATTERN=FACTOR" in capsys.readouterr().err


def test_a_cluster_preset_s_fabric_form_takes_failures(capsys):
    """--fail and --degrade on a cluster preset: its fabric form (a file's or --set's) has
    links to fail, its multidim form has none and says which key to set."""
    from flowsim.cli import main

    base = ["collective", "--network", "dgx_h100", "--collective", "all-reduce", "--size",
            "16MiB", "--model", "flow", "--json", "--system", "nccl", "--set",
            "network.cluster.nodes=4", "--set", "network.cluster.hosts_per_leaf=2"]
    fabric = base + ["--set", "network.cluster.form=fabric"]
    assert main(fabric) == 0
    healthy = json.loads(capsys.readouterr().out)["time_ns"]
    assert main(fabric + ["--degrade", "leaf0*=0.25"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ns"] > healthy
    assert main(base + ["--fail", "spine0*"]) == 2
    assert "set 'cluster.form: fabric'" in capsys.readouterr().err


def test_a_training_run_takes_failures_on_a_cluster_fabric(capsys, tmp_path):
    """flowsim run --degrade: a data-parallel step on two DGX nodes of a cluster's fabric is
    slower when the spines between them run at a hundredth of their bandwidth."""
    from flowsim.cli import main

    spec = tmp_path / "run.yml"
    spec.write_text("generator: transformer\nlayers: 2\nhidden: 1024\nheads: 8\n"
                    "sequence: 1024\nglobal_batch: 16\nmicro_batch: 1\ndp: 16\n")
    base = ["run", "--network", "dgx_h100", "--workload", str(spec), "--system", "nccl",
            "--model", "flow", "--json", "--set", "network.cluster.nodes=2", "--set",
            "network.cluster.form=fabric", "--set", "network.cluster.hosts_per_leaf=1"]
    assert main(base) == 0
    healthy = json.loads(capsys.readouterr().out)["time_ns"]
    assert main(base + ["--degrade", "spine*=0.01"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ns"] > 1.5 * healthy
    net = tmp_path / "net.yml"   # the same cluster as a file; its one spine failed: no path
    net.write_text("cluster: {device: h100, nodes: 2, form: fabric, hosts_per_leaf: 1}\n")
    assert main(["run", "--network", str(net), *base[3:10], "--degrade", "spine0*=0.01"]) == 0
    assert json.loads(capsys.readouterr().out)["time_ns"] > 1.5 * healthy
    assert main(["run", "--network", str(net), *base[3:10], "--fail", "spine0"]) == 2
    assert "no path from npu0 to npu8" in capsys.readouterr().err


def test_fat_tree_is_non_blocking_and_dragonfly_routes_minimally():
    tree = flowsim.load_network({"fabric": {"generator": "fat_tree", "k": 4,
                                            "bandwidth": 50, "latency": 100}})
    assert tree.npus == 16 and tree.num_switches == 20
    # inter-pod pairs have (k/2)^2 = 4 equal-cost paths of 6 hops
    message, weight, indptr, links = tree.routes_multipath(np.array([0]), np.array([15]))
    assert message.size == 4 and np.all(np.diff(indptr) == 6)
    np.testing.assert_allclose(weight, 0.25)
    # a permutation across pods runs at full NIC speed in the flow model (non-blocking)
    system = {"preferred-dataset-splits": 1, "endpoint-delay": 0,
              "all-to-all-implementation": ["direct"]}
    shift = flowsim.simulate_collective({"fabric": {"generator": "fat_tree", "k": 4,
                                                    "bandwidth": 50, "latency": 0}},
                                        "send_recv", N, system, model="flow", src=0, dst=15)
    assert float(shift.time_ns) == pytest.approx(N / (50 * GB))
    fly = flowsim.load_network({"fabric": {"generator": "dragonfly", "routers": 2,
                                           "hosts_per_router": 2, "global_links": 1,
                                           "bandwidth": 100, "latency": 100,
                                           "global_latency": 1000}})
    assert fly.npus == 12 and fly.dims == (2, 2, 3)
    message, weight, indptr, links = fly.routes_multipath(np.array([0]), np.array([11]))
    hops = np.diff(indptr)[0]
    assert 3 <= hops <= 5  # host, at most local + global + local, host
    globals_used = sum(fly.link_latency[links] == 1000)
    assert globals_used == 1  # minimal routing crosses one global link


def test_three_tier_clos_with_per_tier_oversubscription_and_shared_nics():
    def clos(spine_ratio):
        return {"fabric": {"generator": "leaf_spine", "hosts": 8, "npus_per_host": 2,
                           "scale_up": {"bandwidth": 400, "latency": 100},
                           "nics_per_host": 1, "nic": {"bandwidth": 50, "latency": 500},
                           "hosts_per_leaf": 2, "pods": 2, "spines": 2,
                           "oversubscription": [1, spine_ratio]}}
    net = flowsim.load_network(clos(1))
    names = net.config.node_names
    assert {"super0", "pod1.spine1", "host3.nic0", "leaf3"} <= set(names)
    # hosts 0 and 7 sit in different pods: the path climbs to a super spine
    _, _, indptr, links = net.routes_multipath(np.array([0]), np.array([14]))
    first = [net.config.link_names[k] for k in links[indptr[0]:indptr[1]]]
    assert any("super" in name for name in first) and first[0] == "npu0->host0.sw"
    system = {"preferred-dataset-splits": 1, "endpoint-delay": 0,
              "all-to-all-implementation": ["direct", "direct"]}
    fast = flowsim.simulate_collective(clos(1), "all_to_all", N, system, model="flow",
                                       dims=[1])
    slow = flowsim.simulate_collective(clos(2), "all_to_all", N, system, model="flow",
                                       dims=[1])
    assert float(slow.time_ns) > float(fast.time_ns)
    with pytest.raises(ConfigError, match="fabric.oversubscription"):
        flowsim.load_network({"fabric": {**clos(1)["fabric"], "oversubscription": 1}})


@pytest.mark.parametrize("fabric,match", [
    ({"generator": "leaf_spine", "hosts": 4, "nic": 50}, "fabric.nic"),
    ({"generator": "leaf_spine", "hosts": 4, "nic": {"bandwidth": 50},
      "oversubscripton": 4}, "unknown key 'fabric.oversubscripton'"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "fail": [3]}, r"fabric.fail\[0\]"),
    ({"npus": 2, "links": [["npu0", "npu1", 1, 1]], "routng": "ecmp"},
     "unknown key 'fabric.routng'"),
    ({"npus": 2, "links": [{"src": "npu0", "dst": "npu1", "bandwidth": 1, "latency": 1,
                            "bw": 2}]}, r"unknown key 'fabric.links\[0\].bw'"),
    ({"generator": "torus", "dims": [100000, 100000], "bandwidth": 1}, "at most"),
])
def test_bad_fabric_values_are_one_clear_error(fabric, match):
    with pytest.raises(ConfigError, match=match):
        flowsim.load_network({"fabric": fabric})


def test_single_path_routes_check_their_endpoints():
    net = flowsim.load_network(ring_of_switches())
    with pytest.raises(RoutingError, match="NPU -1 does not exist"):
        net.routes(np.array([-1]), np.array([2]))
    with pytest.raises(RoutingError, match="NPU 100 does not exist"):
        net.routes(np.array([0]), np.array([100]))


def test_routing_tables_are_sized_by_the_switches_that_reach_npus(monkeypatch):
    # a 1024-GPU pod: 128 scale-up switches and 32 leaves link to NPUs, so the tables hold
    # 160 x nodes entries (the dense form: 1024 NPUs x every link)
    net = flowsim.load_network("dgx_pod_1024_leafspine_1to1")
    tables = net._routing
    assert tables.dist.shape == (net.num_nodes, 160)
    assert tables.hop_ptr.size == 160 * net.num_nodes + 1
    assert np.array_equal(tables.anchor_node, np.unique(net.link_src[net.link_dst < net.npus]))
    # the cap counts those entries: just enough loads, one fewer is a clear error
    import flowsim.topology.fabric_builder as builder

    config = {"fabric": {"generator": "leaf_spine", "hosts": 8, "npus_per_host": 4,
                         "scale_up": {"bandwidth": 400, "latency": 100},
                         "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 2}}
    small = flowsim.load_network(config)
    entries = small._routing.dist.size
    monkeypatch.setattr(builder, "MAX_ROUTING_ENTRIES", entries)
    assert flowsim.load_network(config).npus == 32
    monkeypatch.setattr(builder, "MAX_ROUTING_ENTRIES", entries - 1)
    with pytest.raises(ConfigError, match=f"routing tables of {entries} entries"):
        flowsim.load_network(config)


def test_a_step_whose_ecmp_paths_outgrow_memory_is_refused_before_it_allocates(monkeypatch):
    import flowsim.topology.fabric_network as fabric_network

    net = flowsim.load_network("dgx_pod_1024_leafspine_1to1")
    src = np.arange(64)
    dst = (src + 512) % 1024            # other leaves: 64 paths of 4 links each
    _, _, indptr, _ = net.routes_multipath(src, dst)
    monkeypatch.setattr(fabric_network, "MAX_PATH_LINKS", int(indptr[-1]))
    assert net.routes_multipath(src, dst)[2][-1] == indptr[-1]
    monkeypatch.setattr(fabric_network, "MAX_PATH_LINKS", int(indptr[-1]) - 1)
    with pytest.raises(RoutingError, match="routing: hash"):
        net.routes_multipath(src, dst)
