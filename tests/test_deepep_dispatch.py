"""DeepEP's dispatch (``dispatcher: deepep``): a token crosses the scale-out network once per
node that hosts one of its experts, then reaches each of that node's ranks over NVLink;
node-limited routing (``node_limit``) and FP8 dispatch (``fp8_dispatch``) shrink it further.
Checked against a Monte Carlo draw of the routing, by the bytes and dims of the exchanges it
builds, by what it does to a step, and by its bad specs."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_dispatch import (
    FP8_VALUE_BYTES,
    deepep_copies,
    expected_units,
    routed_units,
)
from flowsim.workload.generators.transformer_parse import parse_transformer

#: 32 NPUs: four nodes of 8 on a slower second dimension
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 4], "bandwidth": [150, 25],
       "latency": [500, 2000]}
MOE = dict(layers=2, hidden=512, heads=8, kv_heads=8, sequence=1024, micro_batch=1, vocab=0,
           experts=64, top_k=8, moe_ffn=256, gated_mlp=True, dp=32, ep=32, global_batch=64)


def _megatron_draw(experts: int, top_k: int, groups: int, limit: int,
                   units: tuple[int, ...], tokens: int = 3000) -> list[float]:
    """Mean units a token's experts touch, token by token as Megatron-Core's
    ``group_limited_topk`` routes them (DeepSeek-V3's node-limited routing is the same rule):
    sigmoid scores of normal logits, each group ranked by the sum of its top_k / limit best,
    the limit best groups kept, the top_k best of their experts picked."""
    rng = random.Random(5)
    size, best = experts // groups, top_k // limit
    totals = [0] * len(units)
    for _ in range(tokens):
        scores = [1 / (1 + math.exp(-rng.gauss(0, 1))) for _ in range(experts)]
        ranked = sorted(range(groups), key=lambda g: -sum(
            sorted(scores[g * size:(g + 1) * size])[-best:]))
        allowed = [e for g in ranked[:limit] for e in range(g * size, (g + 1) * size)]
        picks = sorted(allowed, key=lambda e: -scores[e])[:top_k]
        for i, unit in enumerate(units):
            totals[i] += len({e // unit for e in picks})
    return [total / tokens for total in totals]


@pytest.mark.parametrize("experts, groups, limit, units", [
    (256, 8, 4, (32, 4)),     # DeepSeek-V3: 4 of 8 nodes, 64 ranks of 4 experts
    (256, 8, 2, (32, 4)),
    (256, 8, 4, (128, 8)),    # Megatron-LM's GB200 recipe: 4 of 8 groups over ranks of 8
    (256, 64, 8, (32, 8)),    # groups of 4 experts inside ranks of 8: device-limited
    (288, 18, 4, (24, 6)),    # groups of 16 straddling units of 24 and 6
])
def test_routed_units_follow_megatron_core_s_group_limited_routing(experts, groups, limit,
                                                                    units):
    drawn = _megatron_draw(experts, 8, groups, limit, units)
    got = routed_units(experts, 8, groups, limit, units)
    assert got == pytest.approx(drawn, rel=0.02)
    if all(experts // groups % unit == 0 for unit in units):   # units inside the groups
        uniform = [expected_units(experts // groups * limit, unit, 8) for unit in units]
        assert all(g > u for g, u in zip(got, uniform))   # kept groups tend to be used


def test_every_group_allowed_is_a_uniform_draw():
    assert routed_units(256, 8, 8, 8, (32, 4)) == (expected_units(256, 32, 8),
                                                   expected_units(256, 4, 8))


def test_routing_groups_of_the_nodes_are_node_limited_routing():
    spec = parse_transformer(dict(MOE, dispatcher="deepep", node_limit=2), "argument")
    groups = replace(spec, routing_groups=4)
    assert deepep_copies(groups, 4) == pytest.approx(deepep_copies(spec, 4))
    # 8 groups of 8 experts on 4 nodes: two groups per node, a token on fewer nodes
    finer = deepep_copies(replace(spec, routing_groups=8, node_limit=4), 4)
    assert finer[0] < deepep_copies(replace(spec, node_limit=0), 4)[0]


def test_groups_that_straddle_nodes_are_priced_by_the_same_rule():
    # 48 experts on 24 ranks, 6 nodes of 8 experts: 4 groups of 12 straddle them
    spec = parse_transformer(dict(MOE, dispatcher="deepep", node_limit=4, routing_groups=16),
                             "argument")
    straddling = replace(spec, experts=48, ep=24, top_k=4, routing_groups=4, node_limit=2)
    to_nodes, to_ranks = deepep_copies(straddling, 6)
    assert [to_nodes, to_ranks] == pytest.approx(_megatron_draw(48, 4, 4, 2, (8, 2)),
                                                 rel=0.03)
    assert to_nodes <= 4 and to_ranks <= 4


def test_expected_units_at_its_ends():
    assert expected_units(64, 8, 1) == pytest.approx(1.0)          # one pick: one unit
    assert expected_units(64, 8, 64) == pytest.approx(8.0)         # every expert: every unit
    assert expected_units(64, 1, 5) == pytest.approx(5.0)          # units of one: the picks


def _exchanges(net, backward=False, **keys):
    w = transformer(net, **dict(MOE, **keys))
    # the first micro-batch's forward (or backward) through layer 0
    return [(op.name.split(".", 2)[-1], op.size, op.dims) for op in w.programs[0].ops
            if op.kind == "collective" and op.collective == "all_to_all"
            and op.name.startswith("mb0.layer0.") and ("_backward" in op.name) == backward]


def test_the_exchanges_cross_nodes_once_per_node_then_reach_ranks_inside():
    net = flowsim.load_network(NET)
    tokens, hidden = 1024, 512
    plain = _exchanges(net)
    assert [name for name, _, _ in plain] == ["dispatch", "combine"]
    assert {size for _, size, _ in plain} == {tokens * 8 * hidden * 2}

    deep = _exchanges(net, dispatcher="deepep", node_limit=2, dtype="fp8", fp8_dispatch=True)
    spec = parse_transformer(dict(MOE, dispatcher="deepep", node_limit=2), "argument")
    to_nodes, to_ranks = deepep_copies(spec, 4)
    assert [name for name, _, _ in deep] == ["dispatch.inter", "dispatch.intra",
                                             "combine.intra", "combine.inter"]
    sizes = [size for _, size, _ in deep]
    assert sizes == [round(tokens * to_nodes * hidden * FP8_VALUE_BYTES),
                     round(tokens * to_ranks * hidden * FP8_VALUE_BYTES),
                     round(tokens * to_ranks * hidden * 2), round(tokens * to_nodes * hidden * 2)]
    inter, intra = deep[0][2], deep[1][2]
    assert (inter, intra) == ((1,), (0,))   # across the 4 nodes, then inside one
    assert to_nodes <= 2 < to_ranks <= 8   # at most node_limit nodes, one copy per rank
    # backward: the combine's gradient travels toward the experts (FP8, across nodes
    # first), the dispatch's back in 16 bits (inside the node first)
    back = _exchanges(net, backward=True, dispatcher="deepep", node_limit=2, dtype="fp8",
                      fp8_dispatch=True)
    assert [(name, dims) for name, _, dims in back] == [
        ("combine_backward.inter", (1,)), ("combine_backward.intra", (0,)),
        ("dispatch_backward.intra", (0,)), ("dispatch_backward.inter", (1,))]
    assert [size for _, size, _ in back] == sizes


def test_an_ep_group_inside_one_node_is_the_intra_node_exchange_alone():
    net = flowsim.load_network(NET)
    deep = _exchanges(net, dispatcher="deepep", ep=8)
    assert [name for name, _, _ in deep] == ["dispatch.intra", "combine.intra"]
    spec = parse_transformer(dict(MOE, ep=8, dispatcher="deepep"), "argument")
    assert deep[0][1] == round(1024 * deepep_copies(spec, 1)[1] * 512 * 2)


def test_deepep_shortens_a_step_whose_experts_span_nodes():
    spec = {"generator": "transformer", **MOE}
    times = {}
    for extra in ({}, {"dispatcher": "deepep"}, {"dispatcher": "deepep", "node_limit": 2}):
        ds = flowsim.simulate(NET, {**spec, **extra}, "nccl", model="flow")
        times[tuple(extra.values())] = (float(ds.time_ns), float(ds["compute_ns"].max()))
    plain, deep, limited = times[()], times[("deepep",)], times[("deepep", 2)]
    assert plain[1] == deep[1] == limited[1]   # the same compute
    assert limited[0] < deep[0] < plain[0]     # fewer bytes on the slow dimension


@pytest.mark.parametrize("extra, key", [
    ({"dispatcher": "deepep", "ep": 1}, "dispatcher"),
    ({"node_limit": 2}, "node_limit"),
    ({"dispatcher": "deepep", "fp8_dispatch": True}, "fp8_dispatch"),
    ({"fp8_dispatch": True, "dtype": "fp8"}, "fp8_dispatch"),
    ({"dispatcher": "ring"}, "dispatcher"),
    ({"dispatcher": "deepep", "routing_groups": 8}, "node_limit"),
    ({"dispatcher": "deepep", "routing_groups": 6, "node_limit": 2}, "routing_groups"),
    ({"dispatcher": "deepep", "routing_groups": 8, "node_limit": 9}, "node_limit"),
    ({"routing_groups": 8, "node_limit": 4}, "routing_groups"),   # the all-to-all dispatcher
    ({"dispatcher": "deepep", "routing_groups": 32, "node_limit": 3}, "node_limit"),
    ({"dispatcher": "deepep", "node_limit": 9}, "node_limit"),   # more than top_k=8
])   # 3 groups of 2 experts hold fewer than top_k=8
def test_bad_specs_name_the_key(extra, key):
    assert_spec_refused(dict(MOE, **extra), key)


def test_a_node_limit_too_small_for_top_k_is_refused_naming_it():
    net = flowsim.load_network(NET)
    with pytest.raises(ConfigError, match="'node_limit': expected at least 2"):
        transformer(net, **dict(MOE, dispatcher="deepep", node_limit=1, top_k=20))


def test_megatron_flags_name_deepep_and_node_limited_routing():
    from flowsim.workload.generators.megatron import megatron_keys

    base = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
            "--micro-batch-size 1 --global-batch-size 64 --num-experts 64 --moe-router-topk 8 "
            "--expert-model-parallel-size 32 --bf16 ").split()
    deep = megatron_keys(base + "--moe-token-dispatcher-type flex --moe-enable-deepep "
                                "--moe-router-num-groups 4 --moe-router-group-topk 2".split(),
                         "x")
    assert (deep["dispatcher"], deep["node_limit"], deep["routing_groups"]) == ("deepep", 2, 4)
    hybrid = megatron_keys(base + ["--moe-token-dispatcher-type", "flex",
                                   "--moe-flex-dispatcher-backend", "hybridep"], "x")
    assert hybrid["dispatcher"] == "deepep" and "node_limit" not in hybrid
    plain = megatron_keys(base + ["--moe-token-dispatcher-type", "alltoall",
                                  "--moe-router-group-topk", "2"], "x")
    assert "dispatcher" not in plain and "node_limit" not in plain


def test_a_nemo_config_names_deepep_as_megatron_lms_flags_do():
    import warnings

    from flowsim.workload.generators.nemo import nemo_keys

    model = {"mcore_gpt": True, "num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 1024,
             "num_attention_heads": 8, "encoder_seq_length": 128, "micro_batch_size": 1,
             "global_batch_size": 32, "expert_model_parallel_size": 16,
             "num_moe_experts": 64, "moe_router_topk": 8, "moe_token_dispatcher_type": "flex",
             "moe_enable_deepep": True, "moe_router_num_groups": 2,
             "moe_router_group_topk": 1}
    config = {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16"}, "model": model}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = nemo_keys(config, "nemo.yml")
        plain = nemo_keys({**config, "model": {**model, "moe_token_dispatcher_type":
                                               "alltoall"}}, "nemo.yml")
    assert (keys["dispatcher"], keys["node_limit"], keys["routing_groups"]) == ("deepep", 1, 2)
    assert "dispatcher" not in plain and "node_limit" not in plain


def test_deepep_needs_whole_nodes_whole_experts_and_a_limit_within_the_nodes():
    # an EP group of 6 ranks over nodes of 8 GPUs laid 2 by 2: uneven parts of two nodes
    uneven = flowsim.load_network({"topology": ["Switch", "Switch"], "npus_count": [8, 3],
                                   "bandwidth": [150, 25], "latency": [500, 2000]})
    with pytest.raises(ConfigError, match="'dispatcher': expected alltoall when the expert"):
        transformer(uneven, **dict(MOE, tp=2, dp=12, ep=6, expert_tp=1, experts=12,
                                   global_batch=24, dispatcher="deepep"))
    net = flowsim.load_network(NET)
    with pytest.raises(ConfigError, match="'node_limit': expected at most the 4 nodes"):
        transformer(net, **dict(MOE, dispatcher="deepep", node_limit=5))
    assert_spec_refused(dict(MOE, tp=2, dp=16, ep=16, expert_tp=2, global_batch=32,
                             dispatcher="deepep"), "expert_tp")


def test_device_limited_routing_is_read_with_its_groups():
    """A group per rank or finer (Megatron-Core's device-limited routing) is priced with its
    groups; a group count without the limit is refused naming the flag."""
    import warnings

    from flowsim.workload.generators.megatron import megatron_keys

    base = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
            "--micro-batch-size 1 --global-batch-size 64 --num-experts 64 --moe-router-topk 8 "
            "--expert-model-parallel-size 32 --bf16 --moe-token-dispatcher-type flex ").split()
    keys = megatron_keys(base + "--moe-router-num-groups 32 --moe-router-group-topk 4".split(),
                         "x")
    assert (keys["dispatcher"], keys["node_limit"], keys["routing_groups"]) == ("deepep", 4, 32)
    spec = parse_transformer(dict(MOE, dispatcher="deepep", node_limit=4, routing_groups=32),
                             "argument")
    assert deepep_copies(spec, 4)[1] <= 4   # a token's experts on at most 4 ranks
    with warnings.catch_warnings(), pytest.raises(
            ConfigError, match="'--moe-router-num-groups': expected a positive whole number"):
        warnings.simplefilter("ignore")
        megatron_keys(base + ["--moe-router-group-topk", "2"], "x")


def test_group_limited_routing_over_every_group_is_no_limit():
    """Megatron-Core's top 2 of 2 groups lets a token reach every node; more groups than
    there are, or a fraction, is refused naming the flag."""
    from flowsim.workload.generators.megatron import megatron_keys

    base = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
            "--micro-batch-size 1 --global-batch-size 64 --num-experts 64 --moe-router-topk 8 "
            "--expert-model-parallel-size 32 --bf16 --moe-token-dispatcher-type flex "
            "--moe-router-num-groups 2").split()
    for every in ("2", "0"):   # every group, or none named (Megatron-Core: no limit)
        keys = megatron_keys(base + ["--moe-router-group-topk", every], "x")
        assert keys["dispatcher"] == "deepep" and "node_limit" not in keys \
            and "routing_groups" not in keys
    for bad, expected in (("3", "at most the 2 groups"), ("1.5", "a positive whole number")):
        with pytest.raises(ConfigError, match=f"'--moe-router-group-topk': expected {expected}"):
            megatron_keys(base + ["--moe-router-group-topk", bad], "x")
