"""Multi-head latent attention (``mla``: DeepSeek-V2/V3, Kimi K2) as Megatron-Core computes
it: DeepSeek-V3's published parameter counts, the rank's weights in its gradient reduction,
its GEMMs against Megatron-LM's FLOP formula, the latents' tensor-parallel collectives, the
importers and the bad values."""

from __future__ import annotations

import dataclasses

import pytest

import flowsim
from conftest import iteration_times
from flowsim.errors import ConfigError
from flowsim.workload.flops import megatron
from flowsim.workload.generators import transformer
from flowsim.workload.generators.nemo import nemo_keys
from flowsim.workload.generators.transformer import model_shape
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Gemm

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
QL, KL, QK, R, V = 96, 64, 32, 16, 32
MLA = dict(q_lora_rank=QL, kv_lora_rank=KL, qk_head_dim=QK, qk_pos_emb_head_dim=R,
           v_head_dim=V)
H, HEADS, LAYERS, N = 256, 8, 2, 2 * 128
SPEC = dict(layers=LAYERS, hidden=H, heads=HEADS, sequence=128, micro_batch=2, vocab=0,
            dp=8, sp=True, global_batch=32, gated_mlp=True, ffn=512,
            distributed_optimizer=True, mla=MLA)
#: DeepSeek-V3 (DeepSeek-AI, arXiv 2412.19437, section 4.2 and its config.json)
DEEPSEEK_V3 = dict(layers=61, hidden=7168, heads=128, sequence=4096, global_batch=1,
                   ffn=18432, gated_mlp=True, experts=256, top_k=8, moe_ffn=2048,
                   shared_ffn=2048, moe_layer_freq="[0]*3+[1]*58", vocab=129280,
                   tied_embeddings=False,
                   mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                            qk_pos_emb_head_dim=64, v_head_dim=128))


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _attention_parameters(t: int) -> int:
    """A rank's attention weights: the duplicated down projections and norms whole, the
    up and output projections split over t ranks."""
    a = HEADS // t
    return H * (QL + KL + R) + QL + KL + QL * a * (QK + R) + KL * a * (QK + V) + a * V * H


#: Kimi K2 (Moonshot AI, arXiv 2507.20534; its config.json): DeepSeek-V3's architecture with
#: 64 heads, 384 experts and one dense layer
KIMI_K2 = dict(DEEPSEEK_V3, heads=64, experts=384, moe_layer_freq="[0]*1+[1]*60",
               vocab=163840)


@pytest.mark.parametrize(("spec", "total", "activated", "rel"), [
    # "671B total parameters, of which 37B are activated for each token" (abstract)
    (DEEPSEEK_V3, 671e9, 37e9, 1e-3),
    # "1 trillion total parameters, 32 billion activated" (its model card; rounded there)
    (KIMI_K2, 1.0e12, 32e9, 0.03),
], ids=["deepseek_v3", "kimi_k2"])
def test_published_models_have_their_parameter_counts(spec, total, activated, rel):
    """MLA, shared experts and the dense first layers together give the published totals;
    with the routed experts a token uses (top_k of them) the activated ones."""
    shape = model_shape(parse_transformer(spec, "spec"))
    assert shape.parameters == pytest.approx(total, rel=rel)
    assert dataclasses.replace(shape, experts=shape.top_k).parameters == \
        pytest.approx(activated, rel=0.03)


@pytest.mark.parametrize("tp", [1, 2])
def test_a_rank_reduces_the_gradients_of_its_weights(net, tp):
    """FP32 gradients of every layer's weights: MLA's attention, the gated MLP split over
    TP, two norms."""
    w = transformer(net, **dict(SPEC, tp=tp, dp=16 // tp))
    grads = sum(op.size for op in w.programs[0].ops if op.kind == "collective"
                and op.name.startswith("dense_grads"))
    per_layer = _attention_parameters(tp) + 3 * H * 512 // tp + 2 * H
    assert grads == 4 * LAYERS * per_layer
    if tp == 1:   # the whole model's, as the FLOP conventions count it
        assert model_shape(parse_transformer(dict(SPEC, tp=1, dp=16), "s")).parameters == \
            LAYERS * per_layer


def test_its_gemms_do_the_work_megatron_counts(net):
    """Megatron-LM's MLA terms without the scores' (its projections: every GEMM three times)
    against the GEMMs the generator prices on one rank (TP 1): equal up to the norms'
    weights, which Megatron's formula counts as GEMM work."""
    spec = dict(SPEC, tp=1, dp=16)
    program = transformer(net, **spec).programs[0]
    gemms = sum(k.flops for op in program.ops if op.kind == "compute" for k in op.kernels
                if isinstance(k, Gemm))
    shape = model_shape(parse_transformer(spec, "s"))
    tokens = SPEC["global_batch"] * SPEC["sequence"]
    scores = 6 * tokens * LAYERS * SPEC["sequence"] * HEADS * (QK + R + V)
    assert gemms == pytest.approx((megatron(shape) - scores) / 16, rel=2e-3)


@pytest.mark.parametrize("q_lora_rank", [QL, 0])
def test_tensor_parallel_ranks_share_the_gemms(net, q_lora_rank):
    """With sequence parallelism the two TP ranks' GEMMs add up to one rank's at TP 1: the
    duplicated down projections run on each rank's half of the tokens, the rest is split.
    Without a query latent the queries come from the hidden state, split by heads."""
    mla = dict(MLA, q_lora_rank=q_lora_rank)

    def gemms(tp):
        program = transformer(net, **dict(SPEC, mla=mla, tp=tp, dp=16 // tp,
                                          global_batch=2 * 16 // tp)).programs[0]   # 1 each
        return sum(k.flops for op in program.ops if op.kind == "compute"
                   for k in op.kernels if isinstance(k, Gemm))
    assert 2 * gemms(2) == pytest.approx(gemms(1), rel=1e-12)


@pytest.mark.parametrize("dtype, element", [("bf16", 2), ("fp8", 1)])
def test_the_latents_are_gathered_not_the_hidden_state(net, dtype, element):
    """With TP 2 and sequence parallelism the attention's all-gather carries the rank's
    latents (n/t tokens of q_lora + kv_lora + rotary key; in FP8 one byte an element, cast
    before the gather as Transformer Engine does), its backward reduce-scatters their
    gradient (n tokens, 16-bit) and gathers them again for the weight gradients."""
    program = transformer(net, **dict(SPEC, tp=2, dp=8, dtype=dtype)).programs[0]
    by_name = {op.name: op for op in program.ops}
    latent = QL + KL + R
    assert by_name["mb0.layer0.attention.all_gather"].size == N // 2 * latent * element
    assert by_name["mb0.layer0.attention.dgrad.qkv.reduce_scatter"].size == N * latent * 2
    assert by_name["mb0.layer0.attention.dgrad.qkv.input.all_gather"].size == \
        N // 2 * latent * element
    assert by_name["mb0.layer0.attention.dgrad.all_gather"].size == N // 2 * H * element


def test_the_importers_read_it(net):
    args = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
            "--micro-batch-size 2 --global-batch-size 32 --swiglu --ffn-hidden-size 512 "
            "--use-distributed-optimizer --bf16 --tensor-model-parallel-size 2 "
            "--sequence-parallel --multi-latent-attention --q-lora-rank 96 "
            "--kv-lora-rank 64 --qk-head-dim 32 --qk-pos-emb-head-dim 16 --v-head-dim 32")
    times = iteration_times(net, dict(SPEC, tp=2, dp=8, generator="transformer",
                                      device="h100"),
                            {"generator": "megatron", "args": args, "device": "h100"})
    assert times[0] == times[1]
    config = {"trainer": {"num_nodes": 2, "devices": 8},
              "model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
                        "multi_latent_attention": True, "q_lora_rank": None,
                        "kv_lora_rank": 64}}
    assert nemo_keys(config, "nemo.yml")["mla"] == dict(
        q_lora_rank=0, kv_lora_rank=64, qk_head_dim=128, qk_pos_emb_head_dim=64,
        v_head_dim=128)


@pytest.mark.parametrize(("extra", "key", "expected"), [
    ({"cp": 2, "dp": 4, "sequence": 128}, "cp", "1 with mla"),
    ({"tp": 2, "dp": 4, "tp_comm_overlap": True}, "tp_comm_overlap", "false with mla"),
    ({"attention": "unfused"}, "attention", "flash or flash2 with mla"),
    ({"kv_heads": 2}, "kv_heads", "heads=8 with mla"),
    ({"mla": {"kv_lora_rank": 0}}, r"mla\.kv_lora_rank", "an integer >= 1"),
    ({"mla": {"rank": 4}}, r"mla\.rank", None),
    ({"mla": [1, 2]}, "mla", "a mapping"),
])
def test_bad_values_name_the_key(extra, key, expected):
    with pytest.raises(ConfigError, match=rf"'{key}'" + (f": expected {expected}"
                                                          if expected else "")):
        parse_transformer({**SPEC, **extra}, "spec.yml")
