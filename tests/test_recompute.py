"""Activation recomputation beyond Megatron-LM's kinds: torchtitan's per-op policy
(``recompute: every_other_matmul``) and full recomputation of every N-th layer
(``recompute_every``) or of the first N layers of each model chunk (``recompute_layers``,
Megatron-Core's block method), checked by closed forms (the GEMM FLOPs recomputed, the gathers
repeated), by order (time and memory between none and full) and by their bad specs."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Gemm

#: one node of 8 GPUs
NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
#: a Llama-like layer: grouped-query attention (2 key-value heads of 32), gated MLP
LLAMA = dict(layers=4, hidden=256, heads=8, kv_heads=2, ffn=512, gated_mlp=True,
             sequence=128, micro_batch=2, vocab=0, position_embedding="rope")


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def _gemm_flops(workload) -> float:
    return sum(k.flops for op in workload.programs[0].ops if op.kind == "compute"
               for k in op.kernels if isinstance(k, Gemm))


@pytest.mark.parametrize("t", [1, 2])
def test_every_other_matmul_recomputes_wk_wo_and_w3(node, t):
    """Per layer and micro-batch the policy re-runs the 2nd, 4th and 6th matmul of
    torchtitan's Llama layer (wq wk wv wo w1 w3 w2): 2 n h (kv + q + f) FLOPs per rank, with
    n tokens and the rank's widths q = h / t, kv = 2 x 32 / t, f = ffn / t."""
    keys = dict(LLAMA, tp=t, dp=8 // t, global_batch=2 * (8 // t) * 3, sp=t > 1)
    none = transformer(node, **keys)
    again = transformer(node, **keys, recompute="every_other_matmul")
    n, h = 2 * 128, 256
    q, kv, f = h // t, 64 // t, 512 // t
    per_layer = 2 * n * h * (kv + q + f)
    assert _gemm_flops(again) - _gemm_flops(none) == pytest.approx(4 * 3 * per_layer)
    # with sequence parallelism each side's input is gathered again (not saved)
    gathers = [op for op in again.programs[0].ops if op.kind == "collective"
               and ".recompute." in op.name]
    assert len(gathers) == (2 * 4 * 3 if t > 1 else 0)
    assert all(op.collective == "all_gather" and op.size == n * h * 2 // t for op in gathers)


def test_every_nth_layer_recomputes_that_share_of_the_forward(node):
    keys = dict(LLAMA, dp=8, global_batch=16)
    none, full, half = (transformer(node, **keys, **extra) for extra in (
        {}, {"recompute": "full"}, {"recompute": "full", "recompute_every": 2}))
    assert _gemm_flops(half) - _gemm_flops(none) == \
        pytest.approx((_gemm_flops(full) - _gemm_flops(none)) / 2)
    recomputed = {op.layer for op in half.programs[0].ops if ".recompute." in op.name}
    assert recomputed == {1, 3}   # the 2nd and 4th layer, counted from the first


def test_block_method_recomputes_the_first_layers_of_each_model_chunk():
    """Megatron-Core's ``--recompute-method block --recompute-num-layers 1`` with two
    pipeline stages of two chunks of 2 layers: layers 0, 2, 4 and 6 of 8 run again."""
    net = flowsim.load_network({**NODE, "npus_count": [4]})
    keys = dict(LLAMA, layers=8, pp=2, vpp=2, dp=2, global_batch=8)
    none, full, block = (transformer(net, **keys, **extra) for extra in (
        {}, {"recompute": "full"}, {"recompute": "full", "recompute_layers": 1}))
    recomputed = {op.layer for p in block.programs for op in p.ops if ".recompute." in op.name}
    assert recomputed == {0, 2, 4, 6}
    assert _gemm_flops(block) - _gemm_flops(none) == \
        pytest.approx((_gemm_flops(full) - _gemm_flops(none)) / 2)
    many = transformer(net, **keys, recompute="full", recompute_layers=5)   # past the chunk
    assert _gemm_flops(many) == pytest.approx(_gemm_flops(full))
    assert full.memory["activations"] < block.memory["activations"] < \
        none.memory["activations"]


def test_block_method_keeps_what_the_layers_it_skips_keep():
    """Under the block method the layers past the first N keep everything, the score
    matrices of unfused attention too; and a recomputed mixture of experts under a dense
    layer needs its whole activations beside what is held, more than the dense layer
    above it frees."""
    net = flowsim.load_network(NODE)
    keys = dict(LLAMA, sequence=512, dp=8, global_batch=16, attention="unfused")
    memory = {kind: transformer(net, **keys, **extra).memory["activations"]
              for kind, extra in (("none", {}), ("selective", {"recompute": "selective"}),
                                  ("block", {"recompute": "full", "recompute_layers": 1}))}
    assert memory["selective"] < memory["block"] < memory["none"]
    assert memory["block"] > 0.7 * memory["none"]   # 3 of 4 layers keep their scores
    moe = dict(layers=4, hidden=1024, heads=8, kv_heads=8, sequence=2048, vocab=0, ffn=512,
               experts=8, top_k=8, moe_ffn=2048, gated_mlp=True, pp=2, dp=4, ep=4,
               global_batch=8, moe_layer_freq=[1, 0, 1, 0], recompute="full")
    full = transformer(net, **moe).memory["activations"]
    block = transformer(net, **moe, recompute_layers=1).memory["activations"]
    assert block > full   # the MoE layer's whole activations, beside the dense layer's


def test_mixtures_of_experts_and_latent_attention_recompute_by_the_same_count(node):
    """DeepSeek-V3's layer as torchtitan runs it: wq_a wq_b wkv_a wkv_b wo, then the
    router and the shared expert's w1 w3 w2: wq_b, wkv_b, the router and w3 run again, and
    the routed experts' grouped GEMMs (not matmuls to the policy) all of them."""
    mla = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_head_dim": 32, "qk_pos_emb_head_dim": 16,
           "v_head_dim": 32}
    keys = dict(LLAMA, kv_heads=8, experts=8, top_k=2, moe_ffn=128, shared_ffn=128, mla=mla,
                dp=8, global_batch=16)
    none = transformer(node, **keys)
    again = transformer(node, **keys, recompute="every_other_matmul")
    n, h, heads = 2 * 128, 256, 8
    # the routed experts' forward GEMM FLOPs per layer, as the run without recomputation has
    experts = sum(kn.flops for op in none.programs[0].ops if op.kind == "compute" and
                  op.name.endswith(".experts") and op.pass_ == "fwd"
                  for kn in op.kernels if isinstance(kn, Gemm)) / 4   # per layer (1 mb)
    per_layer = 2 * n * (heads * (32 + 16) * 64 + heads * (32 + 32) * 32 + 8 * h
                         + 128 * h) + experts
    assert experts > 0
    assert _gemm_flops(again) - _gemm_flops(none) == pytest.approx(4 * per_layer)


def test_time_and_memory_lie_between_none_and_full(node):
    keys = dict(LLAMA, dp=8, global_batch=16)
    kinds = ({"recompute": "none"}, {"recompute": "every_other_matmul"},
             {"recompute": "full", "recompute_every": 2},
             {"recompute": "full", "recompute_layers": 1}, {"recompute": "full"})
    times, memory = [], []
    for extra in kinds:
        spec = {"generator": "transformer", **keys, **extra}
        times.append(float(flowsim.simulate(node, spec, "nccl", model="analytical").time_ns))
        memory.append(transformer(node, **keys, **extra).memory["activations"])
    assert all(times[0] < t < times[-1] for t in times[1:-1])
    assert all(memory[0] > m > memory[-1] for m in memory[1:-1])


@pytest.mark.parametrize("extra, key", [
    ({"recompute_every": 2}, "recompute_every"),
    ({"recompute": "selective", "recompute_every": 3}, "recompute_every"),
    ({"recompute": "every_other_matmul", "attention": "unfused"}, "attention"),
    ({"recompute": "full", "recompute_every": 0}, "recompute_every"),
    ({"recompute": "selective", "recompute_layers": 2}, "recompute_layers"),
    ({"recompute": "full", "recompute_layers": -1}, "recompute_layers"),
    ({"recompute": "full", "recompute_layers": 1, "recompute_every": 2}, "recompute_layers"),
])
def test_bad_recomputation_is_named(node, extra, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        transformer(node, **LLAMA, dp=8, global_batch=16, **extra)
