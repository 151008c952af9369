"""Dense and MoE layers in one model (Megatron-Core's ``--moe-layer-freq``): DeepSeek-V3's
first three dense layers, Llama 4 Maverick's alternation. A mixed model's per-layer work is
the dense model's for its dense layers and the all-MoE model's for the others: GEMM FLOPs,
all-to-alls, gradient bytes and Megatron-LM's model FLOPs checked against those two; the
pattern's forms, the importers and the bad values."""

from __future__ import annotations

import warnings

import pytest

import flowsim
from conftest import iteration_times
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
MOE = dict(layers=4, hidden=256, heads=8, sequence=128, micro_batch=2, vocab=0, tp=2, dp=8,
           ep=4, experts=8, top_k=2, sp=True, global_batch=32, gated_mlp=True, ffn=1024,
           moe_ffn=256, shared_ffn=256, distributed_optimizer=True)
DENSE = dict(MOE, experts=0, ep=1, top_k=0, moe_ffn=0, shared_ffn=0)
PATTERN = [0, 1, 0, 1]


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


@pytest.fixture(scope="module")
def programs(net):
    return {name: transformer(net, **spec).programs[0] for name, spec in (
        ("moe", MOE), ("dense", DENSE), ("mixed", dict(MOE, moe_layer_freq=PATTERN)))}


def _gemm_flops(program) -> float:
    return sum(k.flops for op in program.ops if op.kind == "compute" for k in op.kernels
               if isinstance(k, Gemm))


def _bytes(program, prefix) -> int:
    return sum(op.size for op in program.ops if op.kind == "collective"
               and op.name.startswith(prefix))


@pytest.mark.parametrize(("given", "pattern"), [
    (2, (1, 0, 1, 0)), ("2", (1, 0, 1, 0)), (PATTERN, tuple(PATTERN)),
    ("[0]*2+[1]*2", (0, 0, 1, 1)), ("([0]+[1])*2", (0, 1, 0, 1)), ("2*[0]+2*[1]", (0, 0, 1, 1)),
    (1, ()), ([1] * 4, ()), (None, ()),
])
def test_the_pattern_reads_as_megatron_s(given, pattern):
    """An integer N makes every N-th layer from layer 0 a mixture of experts (Megatron-Core's
    ``moe_layer_pattern``); a list or Megatron-LM's list expression gives each layer."""
    assert parse_transformer(dict(MOE, moe_layer_freq=given), "s").moe_layer_freq == pattern


def test_dense_layers_do_the_dense_model_s_work(programs):
    """Half the layers dense: the GEMM FLOPs are half the dense model's and half the MoE
    model's; all-to-alls only in the MoE layers (1 and 3)."""
    mixed = _gemm_flops(programs["mixed"])
    assert mixed == pytest.approx((_gemm_flops(programs["dense"]) +
                                   _gemm_flops(programs["moe"])) / 2, rel=1e-12)
    a2a = {op.layer for op in programs["mixed"].ops if op.collective == "all_to_all"}
    assert a2a == {1, 3}
    assert sum(op.collective == "all_to_all" for op in programs["mixed"].ops) * 2 == \
        sum(op.collective == "all_to_all" for op in programs["moe"].ops)


def test_gradients_are_reduced_layer_by_layer(programs):
    """Dense gradients: the dense layers' weights with the MoE layers' attention, router and
    shared experts; expert gradients: the MoE layers' experts only."""
    assert 2 * _bytes(programs["mixed"], "dense_grads") == \
        _bytes(programs["dense"], "dense_grads") + _bytes(programs["moe"], "dense_grads")
    assert 2 * _bytes(programs["mixed"], "expert_grads") == \
        _bytes(programs["moe"], "expert_grads")


def test_pipeline_stages_hold_their_own_kinds(net):
    """Over two pipeline stages, [0, 0, 1, 1] leaves the first stage dense (no all-to-all,
    no expert gradients) and the second a mixture of experts."""
    w = transformer(net, **dict(MOE, moe_layer_freq=[0, 0, 1, 1], pp=2, dp=4, ep=2,
                                global_batch=16))
    assert len(w.programs) == 2   # one program per stage, run by its 8 NPUs
    first, second = w.programs
    for program, moe in ((first, False), (second, True)):
        assert any(op.collective == "all_to_all" for op in program.ops) == moe
        assert (_bytes(program, "expert_grads") > 0) == moe
    assert float(flowsim.simulate(net, w).time_ns) > 0


def test_fully_sharded_units_gather_their_own_weights(net):
    """FSDP gathers each layer's own weights (FP8 ones in one byte): a dense layer's unit is
    the dense model's, an MoE layer's the MoE model's."""
    extra = dict(fsdp=True, distributed_optimizer=False, dtype="fp8", fp8_param_gather=True)

    def gathered(spec, layer):
        program = transformer(net, **dict(spec, **extra)).programs[0]
        return sum(op.size for op in program.ops if op.collective == "all_gather"
                   and op.name.startswith(f"mb0.layer{layer}.") and "params" in op.name)
    mixed = dict(MOE, moe_layer_freq=PATTERN)
    assert gathered(mixed, 0) == gathered(DENSE, 0) > 0
    assert gathered(mixed, 1) == gathered(MOE, 1) > gathered(DENSE, 1)


def test_megatron_counts_dense_and_moe_layers_apart():
    mixed, moe, dense = (model_shape(parse_transformer(s, "s")) for s in (
        dict(MOE, moe_layer_freq=PATTERN), MOE, DENSE))
    assert megatron(mixed) == pytest.approx((megatron(moe) + megatron(dense)) / 2, rel=1e-12)
    assert mixed.parameters == pytest.approx((moe.parameters + dense.parameters) / 2,
                                             rel=1e-12)


def test_memory_and_time_fall_between(net):
    def run(spec):
        ds = flowsim.simulate(net, transformer(net, **spec))
        return float(ds.time_ns), ds.attrs["memory_activations_gib"]
    dense, mixed, moe = run(DENSE), run(dict(MOE, moe_layer_freq=PATTERN)), run(MOE)
    for i in range(2):
        assert min(dense[i], moe[i]) < mixed[i] < max(dense[i], moe[i])


@pytest.mark.parametrize(("extra", "expected"), [
    ({"moe_layer_freq": [0, 1, 0]}, "4 entries, one per layer"),
    ({"moe_layer_freq": []}, "4 entries, one per layer"),
    ({"moe_layer_freq": [0, 0, 0, 0]}, r"at least one 1"),
    ({"moe_layer_freq": 2, "experts": 0, "ep": 1, "top_k": 0, "shared_ffn": 0},
     r"1 \(unset\) without experts"),
    ({"moe_layer_freq": [0, 2, 0, 1]}, r"an integer >= 0 \(at most 1\)"),
    ({"moe_layer_freq": "__import__('os')"}, "an integer N"),
    ({"moe_layer_freq": "[0]*(1<<40)"}, "an integer N"),
    ({"moe_layer_freq": "[0]*4000000*4000000"}, "an integer N"),
    ({"moe_layer_freq": 0}, "an integer N"),
    ({"moe_layer_freq": True}, "an integer N"),
    # sums growing a huge list (each + copies it), digits int() refuses, a long expression
    ({"moe_layer_freq": "+".join(["[0]*1048576"] * 200)}, "an integer N"),
    ({"moe_layer_freq": "\u00b2"}, "an integer N"),
    ({"moe_layer_freq": "--2"}, "an integer N"),
    ({"moe_layer_freq": "9" * 5000}, "an integer N"),
    ({"moe_layer_freq": "+".join(["[1]"] * 5000)}, "an integer N"),
])
def test_bad_patterns_name_the_key(extra, expected):
    with pytest.raises(ConfigError, match=rf"'moe_layer_freq(\[1\])?': expected {expected}"):
        parse_transformer({**MOE, **extra}, "spec.yml")


def test_the_importers_read_it(net):
    """Megatron-LM's ``--moe-layer-freq`` (its list expression) and NeMo's key give the run
    the transformer key does."""
    args = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
            "--micro-batch-size 2 --global-batch-size 32 --tensor-model-parallel-size 2 "
            "--sequence-parallel --expert-model-parallel-size 4 --num-experts 8 "
            "--moe-router-topk 2 --swiglu --use-distributed-optimizer --ffn-hidden-size 1024 "
            "--moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 256 --bf16 "
            "--moe-token-dispatcher-type alltoall --moe-layer-freq ([0]+[1])*2")
    nemo = {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16"},
            "model": {"mcore_gpt": True, "num_layers": 4, "hidden_size": 256,
                      "ffn_hidden_size": 1024, "num_attention_heads": 8,
                      "encoder_seq_length": 128, "micro_batch_size": 2,
                      "global_batch_size": 32, "tensor_model_parallel_size": 2,
                      "expert_model_parallel_size": 4, "num_moe_experts": 8,
                      "moe_router_topk": 2, "moe_ffn_hidden_size": 256,
                      "moe_shared_expert_intermediate_size": 256, "moe_layer_freq": PATTERN,
                      "sequence_parallel": True, "activation": "fast-swiglu",
                      "moe_token_dispatcher_type": "alltoall",
                      "optim": {"name": "distributed_fused_adam",
                                "overlap_grad_sync": False}}}
    direct = dict(MOE, moe_layer_freq=PATTERN, generator="transformer", device="h100")
    times = iteration_times(net, direct,
                            {"generator": "megatron", "args": args, "device": "h100"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        assert nemo_keys(nemo, "nemo.yml")["moe_layer_freq"] == PATTERN
    assert times[1] == times[0]


def test_an_imported_pattern_s_error_names_the_flag(net):
    """A bad --moe-layer-freq is reported as the flag the user wrote, not only the key."""
    args = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
            "--micro-batch-size 1 --global-batch-size 16 --bf16 --num-experts 8 "
            "--moe-layer-freq [0]*3")
    with warnings.catch_warnings(), pytest.raises(
            ConfigError, match=r"'moe_layer_freq': expected 4 entries.*read from "
                               r"--moe-layer-freq in 'args'"):
        warnings.simplefilter("ignore", FlowsimWarning)
        flowsim.simulate(net, {"generator": "megatron", "args": args, "device": "h100"})
