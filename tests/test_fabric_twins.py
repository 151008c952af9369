"""Flows over twin links merged into one flow with a multiplicity (ECMP spraying): the same
times and per-link results as every path simulated, to rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import flowsim
from flowsim.errors import ConfigError, RoutingError
from flowsim.testing import leaf_spine_fabrics
from flowsim.topology.fabric_config import parse_fabric_config
from flowsim.topology.fabric_network import FabricNetwork

RTOL = 1e-9
TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
SMALL_POD = {"fabric": {"generator": "leaf_spine", "hosts": 8, "npus_per_host": 4,
                        "scale_up": {"bandwidth": 400, "latency": 100},
                        "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 2,
                        "spines": 4, "routing": "ecmp"}}


def both(config) -> tuple[FabricNetwork, FabricNetwork]:
    """The fabric with twins merged, and the same fabric simulating every path (``config``:
    a ``fabric:`` mapping or a parsed fabric config)."""
    built = parse_fabric_config(config, "<test>") if isinstance(config, dict) else config
    merged, every_path = FabricNetwork.from_config(built), FabricNetwork.from_config(built)
    object.__setattr__(every_path, "twin_merging", False)
    return merged, every_path


def assert_same_run(config, collective: str, model: str, system="nccl") -> None:
    merged, every_path = both(config)
    a = flowsim.run_collective(merged, collective, "4MiB", system, model=model)
    b = flowsim.run_collective(every_path, collective, "4MiB", system, model=model)
    assert a.time_ns == pytest.approx(b.time_ns, rel=RTOL)
    np.testing.assert_allclose(a.link_bytes, b.link_bytes, rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(a.link_busy_ns, b.link_busy_ns, rtol=RTOL, atol=1e-6)
    # the flows counted are the paths'; the flows simulated, the merged ones
    assert a.stats.flows == b.stats.flows == b.stats.simulated_flows
    assert a.stats.simulated_flows <= b.stats.simulated_flows


def test_a_pods_spines_are_twins_and_hash_routing_merges_nothing():
    merged, every_path = both(SMALL_POD)
    assert merged.merges_twins and not every_path.merges_twins
    rep, size = merged._twins
    names = np.array(merged.config.link_names)
    spine_links = np.array(["spine" in n for n in names])
    assert np.all(size[spine_links] > 1) and np.all(size[~spine_links] == 1)
    # a group: one leaf's uplinks to every spine, of equal bandwidth and latency
    group = np.nonzero(rep == rep[np.nonzero(spine_links)[0][0]])[0]
    assert len({names[k].split("->")[0] for k in group}) == 1
    assert np.unique(merged.link_bandwidth[group]).size == 1
    hashed = {"fabric": {**SMALL_POD["fabric"], "routing": "hash"}}
    assert not flowsim.load_network(hashed).merges_twins
    # the engine sees a group's capacity on its representative
    heads = rep == np.arange(rep.size)
    np.testing.assert_allclose(merged.engine_capacity[heads],
                               merged.link_bandwidth[heads] * size[heads])


def test_merged_routes_stand_for_every_path():
    merged, every_path = both(SMALL_POD)
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(32), np.arange(32)))
    message, weight, mult, indptr, links = merged.routes_merged(src, dst)
    m2, w2, i2, l2 = every_path.routes_multipath(src, dst)
    rep = merged._twins[0]
    # every message's bytes: its copies' shares sum to one
    np.testing.assert_allclose(np.bincount(message, weights=weight * mult), 1.0)
    # the paths, their links mapped to their groups' representatives, counted
    def counted(msg, wt, copies, ptr, lk):
        out: dict = {}
        for f in range(msg.size):
            key = (int(msg[f]), tuple(rep[lk[ptr[f]:ptr[f + 1]]].tolist()), float(wt[f]))
            out[key] = out.get(key, 0) + copies[f]
        return out
    assert counted(message, weight, mult, indptr, links) == \
        counted(m2, w2, np.ones(m2.size), i2, l2)
    assert message.size < m2.size


@pytest.mark.parametrize("name", ["dgx_pod_64_leafspine_4to1", "dgx_pod_1024_rail"])
@pytest.mark.parametrize("collective", ["all_to_all", "all_reduce"])
@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_bundled_fabrics_time_alike_merged_or_not(name, collective, model):
    raw = yaml.safe_load((TOPOLOGIES / f"{name}.yml").read_text())
    assert raw["fabric"].get("routing", "ecmp") == "ecmp"
    assert_same_run(raw, collective, model)


@pytest.mark.parametrize("collective", ["all_to_all", "all_reduce"])
def test_a_three_tier_clos_with_shared_nics_times_alike_merged_or_not(collective):
    # twins at every tier: a host's two NICs, a pod's spines, the super spines
    cluster = {"device": "h100_sxm_80gb", "nodes": 16, "gpus_per_node": 8, "nic_gbps": 400,
               "nics_per_node": 2, "fabric": "clos", "form": "fabric", "hosts_per_leaf": 2,
               "tiers": 3, "hosts_per_pod": 8, "oversubscription": [1, 2]}
    config = flowsim.load_network({"cluster": cluster}).config
    merged, _ = both(config)
    assert set(np.unique(merged._twins[1]).tolist()) == {1, 2, 4, 8}
    assert_same_run(config, collective, "flow")


def test_a_failed_spine_link_breaks_only_its_own_symmetry():
    config = {"fabric": {**SMALL_POD["fabric"], "fail": ["leaf0->spine1*"]}}
    merged, _ = both(config)
    assert merged.merges_twins       # the other spines are still twins
    for collective in ("all_to_all", "all_reduce"):
        assert_same_run(config, collective, "flow")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(leaf_spine_fabrics(hosts=(2, 4, 8), routings=("ecmp",), failures=True),
       st.sampled_from(["all_to_all", "all_reduce", "all_gather"]),
       st.sampled_from(["flow", "analytical"]))
def test_random_sprayed_fabrics_time_alike_merged_or_not(config, collective, model):
    try:
        assert_same_run(config, collective, model)
    except (ConfigError, RoutingError):    # the failure cut NPUs off: not this test's case
        reject()


@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_a_training_run_counts_the_paths_flows_merged_or_not(model):
    """A training run (the timers of workloads, not of single collectives) on a fabric with
    twins merged takes the same time as on every path, and counts the flows the paths carry
    as the collectives do: the merged flows' copies (their multiplicity) included."""
    spec = {"generator": "transformer", "layers": 2, "hidden": 1024, "ffn": 4096, "heads": 8,
            "vocab": 32000, "sequence": 1024, "global_batch": 16, "micro_batch": 1, "tp": 4,
            "pp": 2, "dp": 4}   # pipeline sends cross the fabric too
    merged, every_path = both(SMALL_POD)
    a = flowsim.simulate(merged, spec, "nccl", model=model)
    b = flowsim.simulate(every_path, spec, "nccl", model=model)
    assert float(a.time_ns) == pytest.approx(float(b.time_ns), rel=RTOL)
    assert a.attrs["stats_flows"] == b.attrs["stats_flows"] == b.attrs["stats_simulated_flows"]
    assert a.attrs["stats_simulated_flows"] < b.attrs["stats_simulated_flows"]
