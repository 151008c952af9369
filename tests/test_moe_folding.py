"""Megatron-Core's MoE parallel folding (``expert_layout: folded``): the expert-parallel
ranks are the first ``ep`` of the context x data-parallel ranks (of all three, tensor-parallel
first, when experts are not split over TP: ``expert_tp: 1``), so with context parallelism
they take its ranks first; with neither the layout is the plain one."""

from __future__ import annotations

import math

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_mapping import map_groups
from flowsim.workload.generators.transformer_parse import parse_transformer

#: 64 NPUs: 8 per node (TP 2 x CP 4 inside), 8 nodes
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 8], "bandwidth": [300, 50],
       "latency": [500, 2000]}
MOE = dict(layers=2, hidden=256, heads=8, kv_heads=8, sequence=256, micro_batch=1, vocab=0,
           experts=8, top_k=2, sp=True, gated_mlp=True, distributed_optimizer=True)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _groups(net, **spec):
    view, groups, _ = map_groups(net, parse_transformer(dict(MOE, **spec), "argument"))
    return view, groups


def _size(view, dims):
    return math.prod(int(view.dims[d]) for d in dims)


@pytest.mark.parametrize("tp, cp, ep, dp", [(2, 4, 8, 8), (2, 4, 4, 8), (2, 4, 2, 8),
                                            (2, 1, 8, 32), (1, 8, 8, 8)])
def test_folded_expert_groups_take_the_context_parallel_ranks_first(net, tp, cp, ep, dp):
    view, g = _groups(net, tp=tp, cp=cp, ep=ep, dp=dp, expert_layout="folded",
                      global_batch=dp)
    assert _size(view, g.tp) == tp and _size(view, g.cp) == cp and _size(view, g.ep) == ep
    assert _size(view, g.dp) == cp * dp                 # dense gradients: CP x DP
    assert _size(view, g.ep) * _size(view, g.expert_dp) == cp * dp
    if cp > 1:   # the context-parallel ranks are in the expert group, or hold it
        assert set(g.cp) <= set(g.ep) or set(g.ep) <= set(g.cp)
    else:
        plain_view, plain = _groups(net, tp=tp, cp=cp, ep=ep, dp=dp, global_batch=dp)
        assert g == plain and tuple(view.dims) == tuple(plain_view.dims)


@pytest.mark.parametrize("tp, cp, ep, dp", [(2, 4, 8, 8), (2, 4, 2, 8), (1, 8, 8, 8)])
def test_the_expert_group_of_rank_0_is_megatron_core_s(net, tp, cp, ep, dp):
    """Megatron-Core's ranks in order (TP innermost): folded, the expert group of rank 0 is
    the next ``ep`` TP-strided ranks (its expert grid, TP x EP x expert-DP, over the same
    ranks); within DP, it strides over the CP ranks too."""
    for layout, stride in (("folded", tp), ("within_dp", tp * cp)):
        view, g = _groups(net, tp=tp, cp=cp, ep=ep, dp=dp, expert_layout=layout,
                          global_batch=dp)
        (group,) = [row for row in view.dim_groups(g.ep) if 0 in row]
        assert sorted(group.tolist()) == [k * stride for k in range(ep)], layout


def test_plain_expert_groups_skip_the_context_parallel_ranks(net):
    view, g = _groups(net, tp=2, cp=4, ep=8, dp=8, global_batch=8)
    assert not set(g.cp) & set(g.ep) and _size(view, g.ep) == 8


def test_folding_lets_expert_parallelism_exceed_data_parallelism(net):
    """EP 8 over CP 4 x DP 2: impossible inside DP, the folded layout's case (NeMo's
    Mixtral 8x22B runs EP 8 with CP 8 x DP 4); the run builds and its all-to-alls span 8
    ranks."""
    spec = dict(MOE, tp=2, cp=4, ep=8, dp=4, global_batch=4)
    with pytest.raises(ConfigError, match=r"'ep': expected a divisor of dp=4 \(expert "
                                          r"parallelism splits the data-parallel ranks; "
                                          r"expert_layout: folded lets it span"):
        transformer(flowsim.load_network({**NET, "npus_count": [8, 4]}), **spec)
    small = flowsim.load_network({**NET, "npus_count": [8, 4]})
    w = transformer(small, **spec, expert_layout="folded")
    a2a = [op for op in w.programs[0].ops if op.collective == "all_to_all"
           and ".kv" not in op.name]   # the experts' (not the CP ring's exchanges)
    assert a2a and {_size(w.network, op.dims) for op in a2a} == {8}
    assert flowsim.run_training(small, w, device="h100").summary()["time_ns"] > 0


@pytest.mark.parametrize("extra, key", [
    (dict(ep=8, cp=8, dp=2, tp=1), None),
    (dict(ep=6, cp=4, dp=6, tp=1, experts=12, global_batch=6), "ep"),
    (dict(expert_tp=1), None),                           # EP = TP 2 x CP 4
    (dict(expert_tp=1, ep=4, tp=8, cp=1, dp=8), None),   # EP = half of TP
    (dict(expert_tp=1, ep=4, tp=8, cp=1, dp=8, experts=6), "experts"),
    (dict(expert_tp=1, ep=6, tp=2, cp=4, dp=8, experts=12), "ep"),   # 6: not 2 x a part of 4
    (dict(fsdp=True), None),
    (dict(fsdp=True, fsdp_shard=2, ep=16, experts=16), "ep"),   # not into the replicas
    (dict(dims={"tp": [0]}), "expert_layout")])
def test_what_folding_cannot_express_is_one_line(net, extra, key):
    spec = dict(dict(MOE, tp=2, cp=4, ep=8, dp=8, global_batch=8, expert_layout="folded"),
                **extra)
    if key is None:
        parse_transformer(spec, "argument")
        return
    assert_spec_refused(spec, key)


def test_megatron_lm_command_lines_fold_as_megatron_core_does():
    """Today's Megatron-LM folds: EP 8 with CP 4 x DP 2 is a command line it runs."""
    args = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 256 "
            "--micro-batch-size 1 --global-batch-size 2 --tensor-model-parallel-size 2 "
            "--context-parallel-size 4 --expert-model-parallel-size 8 --num-experts 8 "
            "--moe-token-dispatcher-type alltoall --sequence-parallel --swiglu --bf16 "
            "--vocab-size 1024")
    small = flowsim.load_network({**NET, "npus_count": [8, 2]})
    run = flowsim.run_training(small, {"generator": "megatron", "args": args,
                                       "device": "h100"}, "nccl")
    assert run.summary()["time_ns"] > 0


@pytest.mark.parametrize("tp, cp, ep, dp", [(2, 4, 8, 8), (2, 4, 16, 8), (2, 1, 16, 32),
                                            (8, 1, 4, 8), (2, 4, 4, 8)])
def test_experts_outside_tensor_parallelism_fold_over_its_ranks_first(net, tp, cp, ep, dp):
    """``expert_tp: 1``: Megatron-Core's expert grid (1 x EP x expert-DP) laid over TP x CP
    x DP in rank order, so the expert group of rank 0 is ranks 0 .. ep - 1 (the TP ranks,
    then CP's, then DP's); the expert weights are reduced over the ranks that remain."""
    experts = max(8, ep)
    view, g = _groups(net, tp=tp, cp=cp, ep=ep, dp=dp, expert_tp=1, expert_layout="folded",
                      global_batch=dp, experts=experts)
    (group,) = [row for row in view.dim_groups(g.ep) if 0 in row]
    assert sorted(group.tolist()) == list(range(ep))
    assert _size(view, g.tp) == tp and _size(view, g.cp) == cp
    assert _size(view, g.dp) == cp * dp
    assert _size(view, g.ep) * _size(view, g.expert_dp) == tp * cp * dp
    w = transformer(net, **dict(MOE, experts=experts), tp=tp, cp=cp, ep=ep, dp=dp,
                    expert_tp=1, expert_layout="folded", global_batch=dp)
    a2a = {_size(w.network, op.dims) for op in w.programs[0].ops
           if op.collective == "all_to_all" and ".kv" not in op.name}
    assert a2a == {ep}


@pytest.mark.parametrize("fsdp_shard, replicas", [(8, 4), (32, 1)])
def test_folded_experts_under_hybrid_sharding_stay_inside_the_sharding_groups(
        net, fsdp_shard, replicas):
    """torchtitan's meshes under FSDP (HSDP): EP 16 takes TP 2 and 8 of the sharding ranks;
    the replicas stay outermost and replicate the experts' shards as the dense ones'."""
    view, g = _groups(net, tp=2, cp=1, ep=16, dp=32, fsdp=True, fsdp_shard=fsdp_shard,
                      expert_tp=1, expert_layout="folded", global_batch=32, experts=16)
    (group,) = [row for row in view.dim_groups(g.ep) if 0 in row]
    assert sorted(group.tolist()) == list(range(16))
    assert _size(view, g.replicate) == replicas
    assert set(g.replicate) <= set(g.dp) and set(g.replicate) <= set(g.expert_dp)
    assert _size(view, g.expert_dp) == 64 // 16 and _size(view, g.dp) == 32
    w = transformer(net, **dict(MOE, experts=16), tp=2, ep=16, dp=32, fsdp=True,
                    fsdp_shard=fsdp_shard, expert_tp=1, expert_layout="folded",
                    global_batch=32)
    assert flowsim.run_training(net, w, device="h100").summary()["time_ns"] > 0
