"""The Muon optimizer (``optimizer: muon`` and ``dist_muon``): its Newton-Schulz products by
closed form, the layer-wise dealing of whole weights, the collectives of its three layouts,
its state memory, what it refuses, and the Megatron-Bridge importer that reads it."""

from __future__ import annotations

from collections import Counter

import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_optimizer import (
    NS_STEPS,
    UPDATE_KERNELS,
    Param,
    layer_parameters,
    newton_schulz,
    packed,
    ping_pong,
)
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Elementwise, Gemm

NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
H, FFN, L = 512, 2048, 4
DENSE = dict(layers=L, hidden=H, ffn=FFN, heads=8, sequence=256, micro_batch=1, vocab=1024,
             tp=1, dp=8, global_batch=16, device="h100", overlap_grad_reduce=True)
MOE = dict(DENSE, experts=16, top_k=2, ep=8, moe_ffn=256, expert_layout="folded",
           gated_mlp=False)


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def _gemms(kernels):
    return [k for k in kernels if isinstance(k, Gemm)]


@pytest.mark.parametrize("rows, cols", [(512, 2048), (2048, 512), (300, 300)])
def test_a_matrix_costs_five_steps_of_4r2c_plus_2r3_in_three_products_each(rows, cols):
    r, c = sorted((rows, cols))
    kernels = newton_schulz(rows, cols)
    gemms = _gemms(kernels)
    assert len(gemms) == 3 * NS_STEPS and all(g.dtype == "bf16" and g.batch == 1 for g in gemms)
    assert sum(g.flops for g in gemms) == NS_STEPS * (4 * r * r * c + 2 * r ** 3)
    assert sum(isinstance(k, Elementwise) for k in kernels) == UPDATE_KERNELS
    assert newton_schulz(cols, rows) == kernels   # the Gram matrix of the smaller side


def test_whole_weights_are_dealt_as_megatron_core_s_docstring_deals_them():
    """``_shard_params_ping_pong``'s own example: 10 parameters p0..p9 after sorting, over 4
    ranks -> [[p0, p7, p8], [p1, p6, p9], [p2, p5], [p3, p4]]; experts on a turn of their own
    over their own ranks."""
    params = [Param(10 + i) for i in range(10)]
    shares = ping_pong(list(reversed(params)), 4, 1)
    assert shares[:4] == [[params[i] for i in rank]
                          for rank in ([0, 7, 8], [1, 6, 9], [2, 5], [3, 4])]
    assert shares[4] == []
    experts = [Param(5 + i, ((1, 5 + i),), True) for i in range(3)]
    shares = ping_pong(params + experts, 4, 2)
    assert shares[4:] == [[experts[0]], [experts[1], experts[2]]]   # turns 0, 1, 1
    assert shares[:4][0] == [params[0], params[7], params[8]]


def test_the_parameter_layout_packs_the_largest_work_first_onto_the_least_loaded_rank():
    work = [Param(n * n, ((n, n),)) for n in (8, 7, 6, 5, 4)]   # cost n^3
    adam = Param(10 ** 9)   # sharded by element instead: in no rank's share
    shares = packed([*work, adam], 2, 1)
    # 512 -> 0; 343 -> 1; 216 -> 1 (343 < 512); 125 -> 0 (512 < 559); 64 -> 1 (559 < 637)
    assert shares[:2] == [[work[0], work[3]], [work[1], work[2], work[4]]]
    assert shares[2] == []


def _step(program):
    (step,) = [op for op in program.ops if op.name == "optimizer"]
    return step


def test_every_rank_orthogonalizes_its_stage_s_layer_weights_without_sharding(node):
    """Plain Muon: each of the four layers' Q, K, V (apart, in one fused weight),
    projection, FC1 and FC2 on every rank; the norms and the vocabulary take Adam."""
    spec = parse_transformer({**DENSE, "optimizer": "muon"}, "<test>")
    program = transformer(node, **DENSE, optimizer="muon").programs[0]
    gemms = _gemms(_step(program).kernels)
    params = layer_parameters(spec, _kernels(spec), 0)
    assert [len(p.matrices) for p in params] == [0, 3, 1, 0, 1, 1]
    assert len(gemms) == L * 6 * 3 * NS_STEPS
    adam = transformer(node, **DENSE).programs[0]
    assert _step(adam).kernels == (Elementwise(_step(adam).kernels[0].bytes,
                                               name="optimizer"),)


def _kernels(spec):
    from flowsim.workload.generators.transformer_mla import layer_kernels

    return layer_kernels(spec)


def test_the_layer_wise_optimizer_prices_its_busiest_rank_s_share(node):
    """dist_muon over DP 8: the step's products are those of the whole weights the ping-pong
    deal gives the rank with the most work (at least an eighth of the stage's, at most all);
    the experts' over expert-data-parallel ranks (1 here: every rank its own two experts'
    FC1 and FC2 in each layer)."""
    plain = sum(g.flops for g in _gemms(_step(
        transformer(node, **DENSE, optimizer="muon").programs[0]).kernels))
    dist = sum(g.flops for g in _gemms(_step(
        transformer(node, **DENSE, optimizer="dist_muon").programs[0]).kernels))
    assert plain / 8 <= dist < plain
    moe = transformer(node, **MOE, optimizer="dist_muon").programs[0]
    shapes = Counter((g.m, g.n, g.k) for g in _gemms(_step(moe).kernels))
    local = 16 // 8   # FC1 (256 x 512) and FC2 (512 x 256): X X^T is 256 x 512 x 256
    assert shapes[(256, 256, H)] == 2 * L * local * NS_STEPS


@pytest.mark.parametrize("keys, grads, gathers", [
    (dict(optimizer="muon"), "all_reduce", 0),
    (dict(optimizer="muon", distributed_optimizer=True), "reduce_scatter", 1),
    (dict(optimizer="dist_muon"), "all_reduce", 1),
])
def test_the_three_layouts_move_gradients_and_weights_as_megatron_core_does(node, keys,
                                                                           grads, gathers):
    """Plain Muon all-reduces; the layer-wise optimizer with Megatron-LM's parameter layout
    reduce-scatters and gathers as ZeRO-1; dist_muon (Megatron-Bridge's) all-reduces, then
    gathers every updated weight at once after the step."""
    program = transformer(node, **DENSE, **keys).programs[0]
    kinds = Counter(op.collective for op in program.ops if op.kind == "collective")
    assert kinds[grads] >= 1 and set(kinds) <= {grads, "all_gather"}
    step = _step(program).id
    after = [op for op in program.ops if op.collective == "all_gather"]
    assert (len(after) >= 1) == bool(gathers)
    if keys["optimizer"] == "dist_muon":
        assert len(after) == 1 and step in after[0].deps


def test_muon_keeps_eight_bytes_of_state_per_layer_weight(node):
    """Unsharded: Adam's 12 bytes for every parameter against Muon's 8 for the layers'
    matrices (QKV, projection, FC1, FC2: 4 h^2 + 2 h ffn each); the layer-wise optimizer's
    busiest rank holds between an eighth and all of it."""
    adam = transformer(node, **DENSE).memory["optimizer"]
    muon = transformer(node, **DENSE, optimizer="muon").memory["optimizer"]
    assert adam - muon == pytest.approx(4 * L * (4 * H * H + 2 * H * FFN), rel=1e-3)
    dist = transformer(node, **DENSE, optimizer="dist_muon").memory["optimizer"]
    assert muon / 8 <= dist < muon


def test_muon_s_step_takes_longer_than_adam_s(node):
    adam = float(flowsim.simulate(node, transformer(node, **DENSE)).time_ns)
    muon = float(flowsim.simulate(node, transformer(node, **DENSE, optimizer="muon")).time_ns)
    dist = float(flowsim.simulate(node, transformer(node, **DENSE,
                                                    optimizer="dist_muon")).time_ns)
    assert adam < dist < muon


@pytest.mark.parametrize("keys, key", [
    (dict(optimizer="muon", fsdp=True, distributed_optimizer=True), "fsdp"),
    (dict(optimizer="muon", dtype="fp8", fp8_param_gather=True, distributed_optimizer=True),
     "fp8_param_gather"),
    (dict(optimizer="dist_muon", distributed_optimizer=True), "distributed_optimizer"),
    (dict(optimizer="dist_muon", lora_rank=8), "lora_rank"),
    (dict(optimizer="sgd"), "optimizer"),
])
def test_what_muon_refuses_is_one_line_naming_the_key(node, keys, key):
    with pytest.raises(ConfigError, match=key) as info:
        transformer(node, **{**DENSE, **keys})
    assert "\n" not in str(info.value)


def test_megatron_bridge_s_optimizer_is_read(node):
    model = dict(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=8,
                 seq_length=256, vocab_size=1024)
    config = {"model": model, "train": {"global_batch_size": 16, "micro_batch_size": 1},
              "optimizer": {"optimizer": "dist_muon"},
              "ddp": {"use_distributed_optimizer": False, "overlap_grad_reduce": True}}
    w = flowsim.load_workload({"generator": "megatron_bridge", "config": config,
                               "device": "h100"}, network=node)
    assert len(_gemms(_step(w.programs[0]).kernels)) == 3 * 3 * NS_STEPS


def test_the_accuracy_page_s_muon_over_adamw_ratios_are_today_s():
    """The page's table: NVIDIA's published AdamW / Muon throughput (Megatron-Bridge 26.02's
    blog post) beside flowsim's Muon / AdamW step times on the same two rows, AdamW as the
    recipes run it and Muon as Megatron-Bridge's ``dist_muon``."""
    import sys
    import warnings
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    import validate_published as vp

    adam = dict(optimizer="adam", distributed_optimizer=True, overlap_param_gather=True,
                fp8_param_gather=True, bucket_size=134217728, align_param_gather=True)
    muon = dict(optimizer="dist_muon", distributed_optimizer=False,
                overlap_param_gather=False, fp8_param_gather=False)

    def step(run, keys):
        row = vp.rows(run)[0]
        spec = {**vp.spec(row), **keys}
        if keys["optimizer"] != "adam":   # Megatron-Core's default buckets
            spec.pop("bucket_size", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(flowsim.simulate(vp.network(row), spec, "nccl",
                                          model=vp.model_for(row)).time_ns)

    page = (root / "docs" / "accuracy" / "published.md").read_text()
    start = page.index("## Muon: Kimi K2")
    lines = [line for line in page[start: page.index("\n## ", start)].splitlines()
             if line.startswith(("| Kimi K2, 256 GB300s (the", "| Qwen3-30B-A3B"))]
    cases = [("mbridge2606_gb300_kimi_k2_mxfp8_256gpu", 1051 / 1029),
             ("mbridge2604_gb300_qwen3_30b_a3b_mxfp8_8gpu", 713 / 686)]
    assert len(lines) == len(cases)
    for line, (run, published) in zip(lines, cases):
        ratio = step(run, muon) / step(run, adam)
        assert line.endswith(f"| {published:.3f} | {ratio:.3f} |"), line


@pytest.mark.parametrize("flags, keys", [
    ("--optimizer muon", {"optimizer": "muon"}),
    ("--optimizer muon --use-distributed-optimizer",
     {"optimizer": "muon", "distributed_optimizer": True}),
    ("--optimizer dist_muon", {"optimizer": "muon", "distributed_optimizer": True}),
    ("--optimizer dist_muon --no-use-layer-wise-param-layout",
     {"optimizer": "dist_muon", "distributed_optimizer": False}),
    ("--optimizer adam --use-distributed-optimizer",
     {"optimizer": "adam", "distributed_optimizer": True}),
])
def test_megatron_lm_s_optimizer_flags_are_read_as_its_arguments_read_them(flags, keys):
    from flowsim.workload.generators.megatron import megatron_keys

    read = megatron_keys(flags + " --num-layers 2 --bf16", "<test>")
    assert {k: read.get(k, "adam" if k == "optimizer" else False) for k in keys} == keys


def test_an_emerging_optimizer_flowsim_does_not_price_is_named():
    from flowsim.workload.generators.megatron import megatron_keys

    with pytest.warns(flowsim.FlowsimWarning, match="--optimizer soap: priced as Adam"):
        keys = megatron_keys("--optimizer soap --num-layers 2 --bf16", "<test>")
    assert "optimizer" not in keys


def test_dist_muon_gathers_every_chunk_s_weights_at_once(node):
    """The first path's one variable-size all-gather of a rank's updated weights, whatever
    the model chunks (Megatron-Core's ``allgather_params``)."""
    keys = dict(DENSE, layers=8, pp=2, vpp=2, dp=4, global_batch=16, optimizer="dist_muon")
    for program in transformer(node, **keys).programs:
        gathers = [op for op in program.ops if op.collective == "all_gather"]
        assert len(gathers) == 1


@pytest.mark.parametrize("reader, args, key", [
    ("megatron", "--optimizer muon --tensor-model-parallel-size 2 --num-layers 2 --bf16",
     "--muon-tp-mode"),
    ("megatron", "--optimizer muon --tensor-model-parallel-size 2 --muon-tp-mode duplicated "
     "--num-layers 2 --bf16", "--muon-tp-mode"),
])
def test_a_muon_mode_flowsim_does_not_price_is_refused_naming_the_flag(reader, args, key):
    from flowsim.workload.generators.megatron import megatron_keys

    with pytest.raises(ConfigError, match=key):
        megatron_keys(args, "<test>")
    blockwise = megatron_keys(args.replace("duplicated", "blockwise") if "duplicated" in args
                              else args + " --muon-tp-mode blockwise", "<test>")
    assert blockwise["optimizer"] == "muon"


@pytest.mark.parametrize("optimizer, distributed, expected", [
    ({"optimizer": "muon"}, True, {"optimizer": "muon", "distributed_optimizer": False}),
    ({"optimizer": "muon", "use_layer_wise_distributed_optimizer": True}, True,
     {"optimizer": "muon", "distributed_optimizer": True}),
    ({"optimizer": "dist_muon"}, False, {"optimizer": "dist_muon",
                                         "distributed_optimizer": False}),
    ({"optimizer": "dist_muon", "muon_tp_mode": "duplicated"}, False, ConfigError),
])
def test_megatron_bridge_s_muon_settings_choose_the_layout(optimizer, distributed, expected):
    from flowsim.workload.generators.megatron_bridge import bridge_keys

    model = dict(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=8,
                 seq_length=256, vocab_size=1024, tensor_model_parallel_size=2)
    config = {"model": model, "train": {"global_batch_size": 16, "micro_batch_size": 1},
              "optimizer": optimizer, "ddp": {"use_distributed_optimizer": distributed}}
    if expected is ConfigError:
        with pytest.raises(ConfigError, match="muon_tp_mode"):
            bridge_keys(config, "<test>")
        return
    keys = bridge_keys(config, "<test>")
    assert {k: keys.get(k, False) for k in expected} == expected


_MLA = {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_head_dim": 64, "qk_pos_emb_head_dim": 32,
        "v_head_dim": 64}


@pytest.mark.parametrize("extra", [
    {}, dict(kv_heads=2), dict(gated_mlp=True),
    dict(experts=8, top_k=2, ep=2, moe_ffn=256, shared_ffn=512, gated_mlp=True),
    dict(experts=8, top_k=2, ep=2, moe_ffn=256, moe_latent=128, gated_mlp=True),
    dict(mla=_MLA), dict(mla={**_MLA, "q_lora_rank": 0}),
    dict(mtp_layers=2, tied_embeddings=False, pp=2, dp=2),
], ids=["mha", "gqa", "gated", "moe", "latent", "mla", "mla_no_q_lora", "mtp"])
def test_muon_s_parameters_are_the_ones_the_model_counts(extra):
    """Every layer's and depth's parameters as Muon's dealing lists them (dense and the
    experts') add up to what the weights, gradients and gathers count
    (``LayerKernels.unit_parameters``): the two enumerations cannot drift apart."""
    spec = parse_transformer({**DENSE, "tp": 2, "dp": 4, "expert_layout": "folded", **extra},
                             "<test>")
    kernels = _kernels(spec)
    for layer in range(spec.layers + spec.mtp_layers):
        dense, expert, _ = kernels.unit_parameters(layer)
        params = layer_parameters(spec, kernels.of_layer(layer), layer)
        assert sum(p.numel for p in params if not p.expert) == dense, layer
        assert sum(p.numel for p in params if p.expert) == expert, layer
