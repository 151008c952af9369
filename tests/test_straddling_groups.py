"""Parallel groups that hold uneven parts of several network dimensions (Megatron-LM's rank
order on nodes the groups do not divide): the view that routes them as they are, checked
against the exact logical view on layouts both can run, and on the cases that used to fail."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.resources import resolve_config_path
from flowsim.topology import view as view_module
from flowsim.topology.view import (
    LogicalView,
    StraddlingView,
    base_dims,
    logical_view,
    straddling_view,
    touched_dims,
)
from flowsim.workload.generators import transformer

#: three 8-GPU nodes (24 NPUs)
THREE_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 3],
               "bandwidth": [300, 25], "latency": [500, 2000]}
SPEC = dict(generator="transformer", layers=12, hidden=256, heads=8, sequence=128,
            micro_batch=1, vocab=0, distributed_optimizer=True)


@pytest.fixture(scope="module")
def three_nodes():
    return flowsim.load_network(THREE_NODES)


def test_touched_dims_follow_the_members_across_nodes(three_nodes):
    """tp 2 x dp 6 x pp 2 on [8, 3]: a DP group (ranks 0, 2, .., 10) holds 4 GPUs of node 0
    and 2 of node 1, a pipeline pair (r, r + 12) crosses nodes and GPUs; aligned dims touch
    their own dimension only."""
    assert touched_dims(three_nodes, (2, 6, 2)) == ((0,), (0, 1), (0, 1))
    assert touched_dims(three_nodes, (8, 3)) == ((0,), (1,))
    assert touched_dims(three_nodes, (4, 2, 3)) == ((0,), (0,), (1,))


def test_a_straddling_view_counts_links_only_for_a_sole_user(three_nodes):
    view = StraddlingView(three_nodes, (2, 6, 2))
    assert view.dims == (2, 6, 2) and view.parents == (0, 1, 1)
    assert view.split == (True, True, True) and not view.replicable
    assert (view.link_dim == -1).all()
    assert view.config.bandwidth_gbps == (300, 25, 25)
    assert not any(view.config.in_network_reduction)
    whole = StraddlingView(three_nodes, (8, 3))   # the base's own dims: nothing is shared
    assert whole.split == (False, False)
    np.testing.assert_array_equal(whole.link_dim, three_nodes.link_dim)
    with pytest.raises(ConfigError, match="do not multiply to the 24 NPUs"):
        StraddlingView(three_nodes, (2, 6))


def test_straddling_view_owns_one_dim_per_group(three_nodes):
    view, owned = straddling_view(three_nodes, (2, 1, 1, 6, 2))
    assert view.dims == (2, 6, 2)
    assert owned == ((0,), (), (), (1,), (2,))


def test_logical_view_picks_the_exact_view_and_falls_back_only_when_it_must(three_nodes):
    assert logical_view(three_nodes, (8, 3))[0] is three_nodes
    exact, _ = logical_view(three_nodes, (2, 4, 3))
    assert type(exact) is LogicalView and exact.dims == (2, 4, 3)
    straddling, _ = logical_view(three_nodes, (2, 6, 2))
    assert type(straddling) is StraddlingView
    with pytest.raises(ConfigError, match="multiply"):
        logical_view(three_nodes, (2, 6))


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_uneven_groups_simulate_where_they_were_refused(three_nodes, model):
    """tp 2 x pp 2 x dp 6 on three nodes runs; the second stage starts at rank 12, in the
    middle of node 1, and the data-parallel gradients cross nodes."""
    spec = dict(SPEC, tp=2, pp=2, dp=6, global_batch=12)
    w = transformer(three_nodes, **{k: v for k, v in spec.items() if k != "generator"})
    assert isinstance(w.network, StraddlingView)
    assert [int(p.npus[0]) for p in w.programs] == [0, 12]
    ds = flowsim.simulate(three_nodes, spec, "nccl", model=model)
    assert ds.sizes["dim"] == 3
    compute = float(ds.compute_ns.max())
    assert float(ds.time_ns) > compute > 0
    assert np.isfinite(ds.exposed_comm_ns).all()


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("degrees", [dict(tp=2, dp=4, pp=3), dict(tp=1, dp=2, pp=12),
                                     dict(tp=4, dp=2, pp=3)])
def test_straddling_view_times_what_the_exact_view_times(three_nodes, monkeypatch, model,
                                                         degrees):
    """On layouts the exact (factored) view runs, the straddling view, forced, simulates
    every group instead of one per class and routes the same messages: the same times."""
    spec = dict(SPEC, **degrees, global_batch=2 * degrees["dp"])
    keys = {k: v for k, v in spec.items() if k != "generator"}
    assert not isinstance(transformer(three_nodes, **keys).network, StraddlingView)
    exact = flowsim.simulate(three_nodes, spec, "nccl", model=model)

    def refuse(sizes, groups):
        raise ConfigError("forced")

    monkeypatch.setattr(view_module, "factor_dims", refuse)
    # views are kept on their network: the forced one in a set of its own, for this test
    monkeypatch.setitem(three_nodes.__dict__, "_logical_views", {})
    assert isinstance(transformer(three_nodes, **keys).network, StraddlingView)
    forced = flowsim.simulate(three_nodes, spec, "nccl", model=model)
    assert forced.sizes["dim"] <= exact.sizes["dim"]
    np.testing.assert_allclose(forced.finish_ns, exact.finish_ns, rtol=1e-12)
    np.testing.assert_allclose(forced.exposed_comm_ns, exact.exposed_comm_ns, rtol=1e-12,
                               atol=1e-3)


def test_one_node_split_into_groups_takes_a_plain_string_algorithm_everywhere():
    """A one-dimension network split into dp 4 x pp 2 pieces: the bundled system's plain
    ``"ring"`` serves every piece, as a list of one ring per piece does (this crashed: the
    string was cloned once per piece, then once more per dimension)."""
    net = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
    spec = dict(SPEC, tp=1, dp=4, pp=2, global_batch=8)
    system = json.loads(resolve_config_path("nccl", kind="system").read_text())
    listed = {k: ([v, v] if k.endswith("-implementation") else v) for k, v in system.items()}
    plain = flowsim.simulate(net, spec, system)
    lists = flowsim.simulate(net, spec, listed)
    assert float(plain.time_ns) == float(lists.time_ns) > 0



def test_base_dims_name_the_network_dims_a_logical_dim_spans():
    base = flowsim.load_network(THREE_NODES)          # [8, 3]
    assert [base_dims(base, d) for d in range(2)] == [(0,), (1,)]
    cut, _ = logical_view(base, (2, 4, 3))            # [2, 4 | 3]: two pieces of dim 0
    assert isinstance(cut, LogicalView)
    assert [base_dims(cut, d) for d in range(3)] == [(0,), (0,), (1,)]
    # 2 x 6 x 2: the 6 hold parts of two nodes; the outer 2 (NPUs 12 apart: GPU 0 of node 0
    # and GPU 4 of node 1) differ in both dims
    uneven, _ = straddling_view(base, (2, 6, 2))
    assert [base_dims(uneven, d) for d in range(3)] == [(0,), (0, 1), (0, 1)]
