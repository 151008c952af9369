"""Shared experts (Megatron-Core's ``--moe-shared-expert-intermediate-size``): a dense MLP
every token passes after the routed experts, split over the tensor-parallel ranks as the
dense MLP is. Checked by closed forms: its GEMM FLOPs, its tensor-parallel collectives, its
gradients' bytes in the data-parallel reduction, Megatron-LM's model FLOPs; the importers'
keys; bad values."""

from __future__ import annotations

import warnings

import pytest

import flowsim
from conftest import ancestors
from flowsim import FlowsimWarning
from flowsim.errors import ConfigError
from flowsim.workload.flops import megatron
from flowsim.workload.generators import transformer
from flowsim.workload.generators.nemo import nemo_keys
from flowsim.workload.generators.transformer import model_shape
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Gemm

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
H, T, LAYERS, SHARED = 256, 2, 2, 512
MOE = dict(layers=LAYERS, hidden=H, heads=8, sequence=128, micro_batch=2, vocab=0, tp=T,
           dp=8, ep=4, experts=8, top_k=2, sp=True, global_batch=32, gated_mlp=True,
           distributed_optimizer=True)
MICRO_BATCHES = 32 // (2 * 8)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


@pytest.fixture(scope="module")
def pair(net):
    return (transformer(net, **MOE).programs[0],
            transformer(net, **MOE, shared_ffn=SHARED).programs[0])


def _gemm_flops(program) -> float:
    return sum(k.flops for op in program.ops if op.kind == "compute" for k in op.kernels
               if isinstance(k, Gemm))


def test_their_gemms_are_a_gated_mlp_of_their_width(pair):
    """Per layer and micro-batch: FC1 (n x 2f/t x h), FC2 (n x h x f/t), forward, data and
    weight gradients: 18 n h f / t FLOPs."""
    n = MOE["micro_batch"] * MOE["sequence"]
    expected = LAYERS * MICRO_BATCHES * 18 * n * H * SHARED / T
    assert _gemm_flops(pair[1]) - _gemm_flops(pair[0]) == pytest.approx(expected, rel=1e-12)


def test_they_gather_and_reduce_over_tensor_parallelism(pair):
    """Sequence parallelism: forward an all-gather before and a reduce-scatter after;
    backward the gradient's all-gather, the input gathered again and a reduce-scatter."""
    shared = [op for op in pair[1].ops if op.kind == "collective" and "shared_expert" in op.name]
    count = {(op.collective, op.pass_) for op in shared}
    assert count == {("all_gather", "fwd"), ("reduce_scatter", "fwd"), ("all_gather", "ig"),
                     ("reduce_scatter", "ig")}
    assert len(shared) == LAYERS * MICRO_BATCHES * 5
    assert all(op.dims == shared[0].dims for op in shared)
    tp_dims = next(op for op in pair[0].ops if op.name.endswith("attention.all_gather")).dims
    assert shared[0].dims == tp_dims


def test_their_gradients_are_reduced_with_the_dense_ones(pair):
    """The shared weights (3 h f / t per rank and layer) are dense parameters: FP32
    gradients reduce-scattered over the data-parallel group, not the expert one."""
    def grads(program, group):
        return sum(op.size for op in program.ops if op.kind == "collective"
                   and op.name.startswith(f"{group}_grads"))
    assert grads(pair[1], "dense") - grads(pair[0], "dense") == \
        pytest.approx(4 * LAYERS * 3 * H * SHARED // T, abs=8)
    assert grads(pair[1], "expert") == grads(pair[0], "expert")


def test_they_run_after_the_routed_experts_combine(pair):
    """Forward, Megatron-Core r0.10-r0.12 without shared-expert overlap: the shared experts
    take the combined tokens, so their first collective waits for the combine."""
    by_id = {op.id: op for op in pair[1].ops}
    first = next(op for op in pair[1].ops if op.pass_ == "fwd"
                 and op.name.startswith("mb0.layer1.shared_expert"))
    assert "mb0.layer1.combine" in {by_id[d].name for d in ancestors(pair[1], first)}


def test_the_routed_backward_waits_for_theirs(pair):
    """No shared-expert overlap: their backward (computed last forward) comes first, and the
    routed experts' all-to-all waits for its kernels and collectives (through the
    dispatcher's unpermute backward, which runs after them)."""
    by_id = {op.id: op for op in pair[1].ops}
    a2a = next(op for op in pair[1].ops if op.name == "mb0.layer1.combine_backward")
    (first,) = [by_id[d] for d in a2a.deps]
    assert first.name == "mb0.layer1.unpermute_backward"
    waits = {by_id[d].name for d in (*first.deps, *first.ctrl_deps)}
    assert "mb0.layer1.shared_expert.wgrad" in waits
    assert "mb0.layer1.shared_expert.dgrad.fc1.reduce_scatter" in waits


def test_megatron_counts_them_in_model_flops():
    """Megatron-LM r0.10's ``num_floating_point_operations``: (f_s / h) * 3/2 more in the
    brackets of 12 B s L h^2, i.e. 18 B s L h f_s."""
    base = parse_transformer(dict(MOE), "spec")
    shared = parse_transformer(dict(MOE, shared_ffn=SHARED), "spec")
    tokens = MOE["global_batch"] * MOE["sequence"]
    assert megatron(model_shape(shared)) - megatron(model_shape(base)) == \
        pytest.approx(18 * tokens * LAYERS * H * SHARED, rel=1e-12)


def test_they_slow_the_iteration_down(net):
    times = [float(flowsim.simulate(net, transformer(net, **MOE, shared_ffn=f)).time_ns)
             for f in (0, SHARED, 4 * SHARED)]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize(("extra", "expected"), [
    ({"experts": 0, "ep": 1, "top_k": 0}, "0 without experts"),
    ({"shared_ffn": 511}, "a multiple of tp=2"),
])
def test_bad_widths_name_the_key(extra, expected):
    with pytest.raises(ConfigError, match=rf"'shared_ffn': expected {expected}"):
        parse_transformer({**MOE, "shared_ffn": SHARED, **extra}, "spec.yml")


def test_the_importers_read_it(net):
    """Megatron-LM's flag and NeMo's model key give the same run as the key."""
    spec = dict(MOE, shared_ffn=SHARED)
    args = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
            "--micro-batch-size 2 --global-batch-size 32 --tensor-model-parallel-size 2 "
            "--sequence-parallel --expert-model-parallel-size 4 --num-experts 8 "
            "--moe-router-topk 2 --swiglu --use-distributed-optimizer --ffn-hidden-size 1024 "
            f"--moe-shared-expert-intermediate-size {SHARED} --bf16 "
            "--moe-token-dispatcher-type alltoall --vocab-size 0")
    nemo = {"trainer": {"num_nodes": 2, "devices": 8},
            "model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
                      "num_moe_experts": 8, "moe_shared_expert_intermediate_size": SHARED}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        assert nemo_keys(nemo, "nemo.yml")["shared_ffn"] == SHARED
        imported = flowsim.simulate(net, {"generator": "megatron", "args": args,
                                          "device": "h100"})
        direct = flowsim.simulate(net, dict(spec, generator="transformer", ffn=1024,
                                            device="h100", tied_embeddings=True))
    assert float(imported.time_ns) == float(direct.time_ns)
