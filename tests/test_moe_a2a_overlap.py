"""Megatron-Core's combined 1F1B (``moe_a2a_overlap``, ``--overlap-moe-expert-parallel-comm``):
one more warm-up forward, then every forward built beside the backward after it, so that
the expert all-to-alls of one pass hide behind the other's compute. Checked by its schedule,
by conservation (the same compute and the same collectives, only their timing changes) and
by its bad specs."""

from __future__ import annotations

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.megatron import megatron_keys
from flowsim.workload.generators.transformer_combined import paired_forwards
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import stage_schedule

#: 16 NPUs: two nodes of 8 on a slower second dimension
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
MOE = dict(layers=4, hidden=512, heads=8, kv_heads=8, sequence=1024, micro_batch=1, vocab=0,
           experts=16, top_k=4, moe_ffn=256, gated_mlp=True, distributed_optimizer=True)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


@pytest.mark.parametrize("pp, vpp", [(1, 1), (2, 2)])
def test_one_more_warmup_forward_then_every_forward_beside_a_backward(pp, vpp):
    keys = dict(MOE, pp=pp, vpp=vpp, dp=16 // pp, ep=16 // pp, global_batch=4 * 16 // pp)
    plain = parse_transformer(keys, "argument")
    both = parse_transformer(dict(keys, moe_a2a_overlap=True), "argument")
    for stage in range(pp):
        order, before = stage_schedule(both, stage), stage_schedule(plain, stage)
        assert sorted(order) == sorted(before)   # the same passes
        first_bwd = next(i for i, u in enumerate(order) if u[0] == "bwd")
        assert first_bwd == next(i for i, u in enumerate(before) if u[0] == "bwd") + 1
        paired = paired_forwards(both, stage)
        assert paired and min(paired) == first_bwd - 1
        assert all(order[i][0] == "fwd" and order[i + 1][0] == "bwd" for i in paired)
        assert not paired_forwards(plain, stage)


@pytest.mark.parametrize("pp, vpp", [(1, 1), (2, 2)])
def test_the_overlap_hides_communication_and_changes_nothing_else(net, pp, vpp):
    keys = dict(MOE, pp=pp, vpp=vpp, dp=16 // pp, ep=16 // pp, global_batch=4 * 16 // pp)
    runs = {}
    for overlap in (False, True):
        spec = {"generator": "transformer", **keys, "moe_a2a_overlap": overlap}
        w = transformer(net, **{k: v for k, v in spec.items() if k != "generator"})
        collectives = sorted((op.name, op.collective, op.size) for p in w.programs
                             for op in p.ops if op.kind == "collective")
        ds = flowsim.simulate(net, spec, "nccl", model="flow")
        runs[overlap] = (collectives, float(ds.time_ns), float(ds["compute_ns"].max()),
                         float(ds["exposed_comm_ns"].max()), w.memory["activations"])
    (c0, t0, busy0, exposed0, kept0), (c1, t1, busy1, exposed1, kept1) = \
        runs[False], runs[True]
    # the extra warm-up forward is held, but each paired forward keeps a layer as the
    # backward beside it frees one: without pipelining, one micro-batch and one layer
    assert kept1 > kept0
    if pp == 1:
        assert kept1 == pytest.approx(kept0 * (1 + 1 / keys["layers"]))
    assert c0 == c1                              # the same collectives, same bytes
    assert busy1 == pytest.approx(busy0)         # the same compute
    assert t1 < t0 and exposed1 < exposed0       # less of the all-to-alls exposed


@pytest.mark.parametrize("extra, key", [
    (dict(ep=1), "moe_a2a_overlap"),
    (dict(pp=2, dp=8, ep=8), "moe_a2a_overlap"),
    (dict(schedule="gpipe"), "schedule"),
    (dict(recompute="full"), "recompute"),
    (dict(pp=2, dp=8, ep=8, vpp=2, fsdp=True), "moe_a2a_overlap"),
])
def test_what_megatron_core_refuses_is_one_line(extra, key):
    assert_spec_refused({**MOE, "dp": 16, "ep": 16, "global_batch": 16,
                         "moe_a2a_overlap": True, **extra}, key)


def test_megatron_lm_s_flag_turns_it_on():
    args = ("pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 "
            "--seq-length 1024 --micro-batch-size 1 --global-batch-size 16 --bf16 "
            "--num-experts 16 --expert-model-parallel-size 16 --moe-token-dispatcher-type "
            "alltoall --overlap-moe-expert-parallel-comm")
    assert megatron_keys(args, "train.sh")["moe_a2a_overlap"] is True
    with pytest.raises(ConfigError, match="'--moe-token-dispatcher-type': expected alltoall"):
        megatron_keys(args.replace("alltoall", "allgather"), "train.sh")
