"""Hybrid models (``hybrid_pattern``: Mamba-2 mixers, attention, MLPs and experts as layers
of their own, Megatron-Core's ``MambaModel``): the pattern's layers against the transformer
they spell, the mixer's kernels against their closed forms, its tensor-parallel
communication, the memory, the FLOP count Megatron-LM reports, and the bad values."""

from __future__ import annotations

import warnings

import pytest

import flowsim
from conftest import iteration_times
from flowsim.errors import ConfigError
from flowsim.workload.flops import megatron
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer import model_shape
from flowsim.workload.generators.transformer_kernels import LayerKernels
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Gemm

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
H, SEQ = 256, 512
BASE = dict(hidden=H, heads=8, kv_heads=2, sequence=SEQ, micro_batch=2, global_batch=32,
            dp=16, ffn=512, gated_mlp=True, vocab=1024, distributed_optimizer=True,
            position_embedding="rope")
MOE = dict(experts=8, top_k=2, moe_ffn=128, shared_ffn=256, ep=4)
MAMBA = dict(heads=16, head_dim=32, state=64, groups=4, chunk=128)
HYBRID = dict(BASE, hybrid_pattern="M-M*-ME*E", mamba=MAMBA, **MOE)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _quiet(net, **spec):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        return transformer(net, **spec)


@pytest.mark.parametrize(("tp", "extra"), [(1, {}), (2, {}), (2, MOE), (1, dict(
    MOE, pp=2, dp=8)), (2, dict(attention="unfused"))],
    ids=["dense", "tp2", "moe", "pipeline", "unfused"])
def test_a_pattern_of_attention_and_mlp_is_the_transformer(net, tp, extra):
    """"*-" per layer (or "*E") spells a transformer: each layer's norm, attention, norm and
    MLP are the transformer layer's kernels, so the step time, the weights and the memory
    are the same; only the rows differ (twice as many, one per block). (Not so where a
    setting acts per layer: recomputation, FSDP's units, combined 1F1B, DualPipeV.)"""
    spec = dict(BASE, tp=tp, **dict(dict(dp=16 // tp), **extra))
    mlp = "E" if extra.get("experts") else "-"
    plain = _quiet(net, layers=4, **spec)
    hybrid = _quiet(net, hybrid_pattern=("*" + mlp) * 4, **spec)
    assert len(hybrid.layers) == len(plain.layers) + 4
    t_plain, t_hybrid = iteration_times(net, plain, hybrid)
    assert t_hybrid == pytest.approx(t_plain, rel=1e-9)
    assert hybrid.memory == pytest.approx(plain.memory, rel=1e-9)
    grads = [sum(op.size for op in w.programs[0].ops if op.kind == "collective"
                 and "grads" in op.name) for w in (plain, hybrid)]
    assert grads[1] == grads[0] > 0


def _mixer(tp: int = 1, **mamba) -> LayerKernels:
    return LayerKernels(parse_transformer(dict(HYBRID, tp=tp, dp=16 // tp, sp=tp > 1,
                                               mamba=dict(MAMBA, **mamba)), "spec"))


def test_the_scan_does_the_ssd_algorithms_products():
    """The SSD scan's matmuls (Dao and Gu, section 6): per chunk of Q tokens and head, the
    chunk's state (2 Q N P), the output from C B^T (causal: Q^2 P) and from the state passed
    in (2 Q N P); per chunk and group C B^T (2 Q^2 N). The backward recomputes the state
    and C B^T, then per head the states', x's (from them, and from C B^T: masked), B's,
    C's, C B^T's and the decay's gradients, per group B's and C's from C B^T's."""
    k = _mixer().mamba
    q, p, n, g, heads = 128, 32, 64, 4, 16
    chunks = 2 * SEQ // q
    forward = chunks * (heads * (2 * q * n * p + q * q * p + 2 * q * n * p) + g * 2 * q * q * n)
    gemm_flops = sum(x.flops for x in k.core if isinstance(x, Gemm))
    assert gemm_flops == forward
    recomputed = chunks * (heads * 2 * q * n * p + g * 2 * q * q * n)
    backward = chunks * (heads * (8 * q * p * n + 5 * q * q * p) + g * 4 * q * q * n)
    assert sum(x.flops for x in k.core_backward if isinstance(x, Gemm)) == \
        recomputed + backward
    assert all(x.dtype == "bf16" for x in k.core if isinstance(x, Gemm))


@pytest.mark.parametrize("tp", [1, 2])
def test_the_projections_split_over_tensor_parallelism(tp):
    """in_proj gives z, x, B, C and dt (2 D + 2 G N + H), out_proj takes D back to the
    hidden size, each rank's share 1/t; the weights the rank holds with them."""
    k = _mixer(tp).mamba
    d, bc, heads = 16 * 32, 2 * 4 * 64, 16
    in_proj = next(x for x in k.in_proj if isinstance(x, Gemm))
    out_proj = next(x for x in k.out_proj if isinstance(x, Gemm))
    assert (in_proj.n, in_proj.k) == ((2 * d + bc + heads) // tp, H)
    assert (out_proj.n, out_proj.k) == (H, d // tp)
    conv = (d + bc) // tp * (4 + 1)
    assert k.parameters == (H * (2 * d + bc + heads) + d * H) // tp + conv + \
        3 * heads // tp + d // tp


def test_each_block_sits_between_its_collectives(net):
    """With TP 2 and sequence parallelism a Mamba layer gathers its input before in_proj
    and reduce-scatters out_proj's output, forward and backward, like the attention; an
    MLP layer has no mixer, a mixer layer no MLP."""
    w = _quiet(net, **dict(HYBRID, tp=2, dp=8, sp=True))
    names = [op.name for op in w.programs[0].ops]
    layer0 = [n for n in names if ".layer0." in n and "recompute" not in n]
    assert any(n.endswith("layer0.mamba.all_gather") for n in layer0)
    assert any(n.endswith("layer0.mamba.reduce_scatter") for n in layer0)
    assert any("layer0.mamba.dgrad" in n for n in layer0)
    assert not any(".mlp" in n or ".attention" in n for n in layer0)
    layer1 = [n for n in names if ".layer1." in n]
    assert any(".mlp" in n for n in layer1)
    assert not any(".mamba" in n or ".attention" in n for n in layer1)


def test_megatrons_hybrid_flop_count():
    """Megatron-LM's ``hybrid_flops``, term by term for the pattern's layers (its Mamba
    term with d = 2 h, whatever the heads' width)."""
    spec = parse_transformer(HYBRID, "spec")
    tokens = 32 * SEQ
    h, p = H, 8 * 32 / H
    attention = 4 * h * p * (h + h * 2 / 8) + 2 * SEQ * h * p
    mlp = 4 * 512 * h * 1.5
    moe = 4 * h * (128 * 2 + 256) * 1.5
    d = 2 * h
    mamba = 2 * h * (2 * d + 2 * 4 * 64 + 16) + 7 * d * 64 + 2 * d * h
    expected = 3 * tokens * (3 * mamba + 2 * attention + 2 * mlp + 2 * moe + 2 * h * 1024)
    assert megatron(model_shape(spec)) == pytest.approx(expected, rel=1e-12)


def test_more_state_costs_more_time(net):
    """The scan's cost grows with the state and falls with fewer heads; the layer's memory
    grows with its projections' widths."""
    times = iteration_times(net, *(_quiet(net, **dict(HYBRID, mamba=dict(MAMBA, state=s)))
                                   for s in (64, 256)))
    assert times[1] > times[0]
    small, large = (_quiet(net, **dict(HYBRID, mamba=dict(MAMBA, heads=x)))
                    for x in (8, 32))
    assert large.memory["activations"] > small.memory["activations"]


@pytest.mark.parametrize(("change", "key"), [
    (dict(hybrid_pattern="M-X"), "hybrid_pattern"),
    (dict(hybrid_pattern="M-M|*-"), "hybrid_pattern"),
    (dict(hybrid_pattern="M-M*-ME*E/MM"), "hybrid_pattern"),
    (dict(hybrid_pattern="M-M*-ME*E/*E/*E", mtp_layers=1, vocab=1024), "mtp_layers"),
    (dict(hybrid_pattern="M-M*-|ME*E", pp=2, dp=8, pipeline_layout=[4, 4]),
     "pipeline_layout"),
    (dict(hybrid_pattern="M-M*-||ME*E", pp=2, dp=8), "hybrid_pattern"),
    (dict(layers=5), "layers"),
    (dict(hybrid_pattern="M-M*-M-*-", experts=8), "experts"),
    (dict(moe_layer_freq=2), "moe_layer_freq"),
    (dict(cp=2, dp=8), "cp"),
    (dict(tp=2, dp=8, mamba=dict(MAMBA, heads=15)), "mamba.heads"),
    (dict(mamba=dict(MAMBA, groups=3)), "mamba.groups"),
    (dict(mamba=dict(MAMBA, heads=0, head_dim=1024)), "mamba.head_dim"),
    (dict(hybrid_pattern=12), "hybrid_pattern"),
    (dict(mamba=dict(MAMBA, width=3)), "mamba.width"),
    (dict(mamba=[1, 2]), "mamba"),
    (dict(hybrid_pattern="*-*-*E*E"), "mamba"),
    (dict(hybrid_pattern="   "), "hybrid_pattern"),
    (dict(mamba=dict(MAMBA, heads=0, head_dim=96)), "mamba.head_dim"),
    (dict(dtype="fp8", mamba=dict(MAMBA, heads=17, groups=1)), "mamba.heads"),
    (dict(moe_a2a_overlap=True), "moe_a2a_overlap"),
    (dict(hybrid_pattern="M*-M*-/*E", experts=0, top_k=0, ep=1, shared_ffn=0, moe_ffn=0,
          vocab=1024), "experts"),
    (dict(hybrid_pattern="M*-M*-", experts=0, top_k=0, ep=1, shared_ffn=0, moe_ffn=0,
          moe_latent=64), "moe_latent"),
    (dict(mtp_repeated=True), "mtp_repeated"),
    (dict(mtp_layers=1), "mtp_layers"),
    (dict(hybrid_pattern="M-M*-", experts=0, top_k=0, ep=1, shared_ffn=0, moe_ffn=0,
          lora_rank=8), "lora_rank"),
    (dict(tp=2, dp=8, tp_comm_overlap=True), "tp_comm_overlap"),
])
def test_bad_values_name_their_key(change, key):
    with pytest.raises(ConfigError) as err:
        parse_transformer(dict(HYBRID, **change), "spec.yml")
    assert str(err.value).startswith("spec.yml: ") and f"key '{key}'" in str(err.value)
    assert "\n" not in str(err.value)


def test_mamba_without_a_pattern_is_refused():
    with pytest.raises(ConfigError, match="mamba"):
        parse_transformer(dict(BASE, layers=2, mamba=MAMBA), "spec.yml")


#: Nemotron 3 Nano's Hugging Face config, its architecture keys (as Megatron-Bridge's
#: NemotronHBridge tests hold it: tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py,
#: with the experts of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16)
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
NANO_HF = {"model_type": "nemotron_h", "hidden_size": 2688, "num_hidden_layers": 52,
           "hybrid_override_pattern": NANO_PATTERN, "num_attention_heads": 32,
           "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 1856,
           "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
           "conv_kernel": 4, "chunk_size": 128, "n_routed_experts": 128,
           "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
           "moe_shared_expert_intermediate_size": 3712, "vocab_size": 131072,
           "tie_word_embeddings": False}


def _nano(**run):
    from flowsim.workload.generators.huggingface import huggingface_keys

    keys = huggingface_keys(NANO_HF, "config.json")
    return parse_transformer({**keys, "sequence": 8192, "global_batch": 512, **run}, "spec")


def test_nemotron_3_nano_has_its_published_size():
    """Read from its Hugging Face config, Nemotron 3 Nano has the sizes its name and model
    card give: 31.6 B parameters, 3.6 B of them active per token with the embeddings
    (NVIDIA's model card for NVIDIA-Nemotron-3-Nano-30B-A3B)."""
    import dataclasses

    shape = model_shape(_nano())
    assert shape.parameters == pytest.approx(31.6e9, rel=0.005)
    active = dataclasses.replace(shape, experts=shape.top_k)
    assert active.parameters == pytest.approx(3.6e9, rel=0.01)


def test_nemotron_3_nano_counts_the_flops_megatron_bridge_reported():
    """The 26.06 table's model TFLOP/s per GPU over its tokens per second per GPU is the
    FLOP count per token Megatron-Bridge used (885 / 39,749 on GB300, 328 / 14,719 on
    H100): flowsim's count of the same model agrees within the table's rounding."""
    spec = _nano()
    per_token = megatron(model_shape(spec)) / (512 * 8192)
    for tflops, tokens in ((885, 39749), (747, 33522), (831, 37316), (328, 14719)):
        assert per_token == pytest.approx(tflops * 1e12 / tokens, rel=2e-3)


def test_a_nemotron_h_config_without_its_pattern_is_refused():
    from flowsim.workload.generators.huggingface import huggingface_keys

    config = {k: v for k, v in NANO_HF.items() if k != "hybrid_override_pattern"}
    with pytest.raises(ConfigError, match="key 'hybrid_override_pattern'"):
        huggingface_keys(config, "config.json")


def test_a_nemotron_h_config_runs_as_a_workload():
    """``generator: huggingface`` on the config: a step of every kind of layer, its
    experts over the node's 8 GPUs; the summary's model FLOPs are the hybrid count."""
    net = flowsim.load_network({"topology": ["Switch"], "npus_count": [8], "bandwidth": [400],
                                "latency": [500]})
    spec = {"generator": "huggingface", "config": NANO_HF, "sequence": 1024,
            "global_batch": 8, "ep": 8, "dtype": "bf16"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        ds = flowsim.simulate(net, spec)
    assert float(ds.time_ns) > 0
    expected = megatron(model_shape(_nano(global_batch=8, sequence=1024, ep=8, dp=8)))
    assert float(ds.attrs["model_flops"]) == pytest.approx(expected, rel=1e-12)


def test_the_bundled_nano_is_the_validation_rows_model():
    """``config: nemotron3_nano`` (workloads/models/) gives the shape the published rows
    read from Megatron-Bridge's recipe (validation/published/megatron_bridge_hybrid.csv)."""
    import csv
    from pathlib import Path

    from flowsim.workload.generators.huggingface import huggingface_keys

    path = Path(__file__).resolve().parents[1] / "validation" / "published" / \
        "megatron_bridge_hybrid.csv"
    keys = huggingface_keys("nemotron3_nano", "spec.yml")
    assert keys == huggingface_keys(NANO_HF, "spec.yml")
    nano = [r for r in csv.DictReader(path.open()) if "nemotron3_nano" in r["run"]]
    assert len(nano) == 5   # GB300, GB200, B300, H100 (26.06) and B200 (26.04.01)
    for row in nano:
        for key in ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab",
                    "experts", "top_k", "moe_ffn", "shared_ffn"):
            assert keys[key] == int(row[key]), key
        assert keys["hybrid_pattern"] == row["hybrid_pattern"]
        mamba = dict(item.split("=") for item in row["mamba"].split(";"))
        assert all(keys["mamba"][k] == int(v) for k, v in mamba.items())
        assert not keys["gated_mlp"] and row["gated_mlp"] == "false"
        assert not keys["tied_embeddings"] and row["tied_embeddings"] == "false"


def test_a_window_applies_to_the_attention_layers_it_names(net):
    """A sliding window on a hybrid model's attention layers (every other one here, as
    ``window_skip_freq`` names them per layer): the windowed layer's attention is cheaper."""
    spec = dict(HYBRID, hybrid_pattern="M*M*", experts=0, top_k=0, ep=1, shared_ffn=0,
                moe_ffn=0, window=64, window_skip_freq=[0, 1, 0, 0])
    ds = flowsim.simulate(net, {"generator": "transformer", **spec})
    forward = ds.layer_compute_ns.sel({"pass": "fwd"}).values[:4]
    assert forward[1] < forward[3]


def test_pipeline_marks_place_the_layers(net):
    """``|`` between the stages' layers, as Megatron-Core reads them (segment ``v pp + r``
    on rank ``r``'s virtual stage ``v``): the same run as the layout given as counts."""
    marked = dict(HYBRID, hybrid_pattern="M-M|*-ME*|E", pp=3, dp=4, ep=2, global_batch=24)
    listed = dict(marked, hybrid_pattern="M-M*-ME*E", pipeline_layout=[3, 5, 1])
    spec = parse_transformer(marked, "spec")
    assert spec.pipeline_layout == (3, 5, 1) and spec.layers == 9
    net12 = flowsim.load_network({"topology": ["Switch", "Switch"], "npus_count": [4, 3],
                                  "bandwidth": [300, 25], "latency": [500, 2000]})
    assert iteration_times(net12, {"generator": "transformer", **marked}) == \
        iteration_times(net12, {"generator": "transformer", **listed})


#: Nemotron 3 Nano's shape as the transformer's keys (what the importers must give)
NANO_KEYS = {"hybrid_pattern": NANO_PATTERN, "layers": 52, "hidden": 2688, "heads": 32,
             "kv_heads": 2, "head_dim": 128, "experts": 128, "top_k": 6, "moe_ffn": 1856,
             "shared_ffn": 3712}


def test_a_megatron_command_line_names_the_pattern_and_the_mixers():
    """Megatron-LM's flags, either name of the pattern (``--hybrid-override-pattern``,
    ``--hybrid-layer-pattern`` since 2026), and ``--mamba-*``."""
    from flowsim.workload.generators.megatron import megatron_keys

    args = ("--num-layers 52 --hidden-size 2688 --ffn-hidden-size 1856 "
            "--num-attention-heads 32 --group-query-attention --num-query-groups 2 "
            "--kv-channels 128 --num-experts 128 --moe-router-topk 6 --moe-ffn-hidden-size "
            "1856 --moe-shared-expert-intermediate-size 3712 --mamba-num-heads 64 "
            "--mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8 --seq-length 8192 "
            "--global-batch-size 512 --micro-batch-size 1 --position-embedding-type none "
            "--squared-relu ")
    for flag in ("--hybrid-override-pattern", "--hybrid-layer-pattern"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flowsim.FlowsimWarning)
            keys = megatron_keys(args + f"{flag} {NANO_PATTERN}", "train.sh")
        assert {k: keys[k] for k in NANO_KEYS} == NANO_KEYS
        assert keys["mamba"] == {"heads": 64, "head_dim": 64, "state": 128, "groups": 8}
        assert parse_transformer({**keys, "ep": 8, "dp": 8}, "s").mamba == \
            _nano().mamba


def test_a_megatron_bridge_run_config_names_the_pattern_and_the_mixers():
    """A Nemotron 3 Nano checkpoint's run_config.yaml (the model provider's Megatron-Core
    settings) gives the same model as its Hugging Face config."""
    from test_megatron_bridge import _run

    from flowsim.workload.generators.megatron_bridge import bridge_keys

    config = _run(num_layers=52, hidden_size=2688, ffn_hidden_size=1856,
                  num_attention_heads=32, num_query_groups=2, kv_channels=128,
                  gated_linear_unit=False, position_embedding_type="none",
                  num_moe_experts=128, moe_router_topk=6, moe_ffn_hidden_size=1856,
                  moe_shared_expert_intermediate_size=3712, hybrid_layer_pattern=NANO_PATTERN,
                  mamba_num_heads=64, mamba_head_dim=64, mamba_state_dim=128,
                  mamba_num_groups=8, mamba_chunk_size=128, vocab_size=131072,
                  tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                  virtual_pipeline_model_parallel_size=None, sequence_parallel=False,
                  expert_model_parallel_size=8, expert_tensor_parallel_size=1,
                  tp_comm_overlap=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        keys = bridge_keys(config, "run_config.yaml")
    assert {k: keys[k] for k in NANO_KEYS} == NANO_KEYS
    spec = parse_transformer({**keys, "dp": 8}, "s")
    nano = _nano()
    assert (spec.mamba, spec.hybrid_pattern, spec.gated_mlp) == \
        (nano.mamba, nano.hybrid_pattern, False)


def test_a_chunk_longer_than_the_sequence_is_the_sequence():
    """The kernels stop at the sequence's end: a chunk of 4,096 tokens over sequences of
    512 does the work of chunks of 512, and a last partial chunk costs its own length."""
    long, exact = _mixer(chunk=4096).mamba, _mixer(chunk=512).mamba
    assert long.core == exact.core and long.core_backward == exact.core_backward
    split = _mixer(chunk=384).mamba   # 384 + 128 tokens per sequence
    p, n, heads = 32, 64, 16
    state = sum(x.flops for x in split._chunk_state)
    assert state == 2 * (2 * p * n * 384 + 2 * p * n * 128) * heads


def test_micro_batches_of_several_sequences_copy_between_layouts():
    """Megatron-Core's copies between the projections' sequence-first layout and the
    kernels' batch-first one are views for a micro-batch of one sequence."""
    one = LayerKernels(parse_transformer(dict(HYBRID, micro_batch=1, global_batch=16),
                                         "spec")).mamba
    two = _mixer().mamba
    names = [getattr(x, "name", "") for x in two.core + two.core_backward]
    assert names.count("contiguous_zxbcdt") == names.count("contiguous_y") == 2
    assert not any(getattr(x, "name", "").startswith("contiguous") for x in one.core)


#: Nemotron 3 Super 120B-A12B (Megatron-LM's release test config at d0b3b775, as
#: Megatron-Bridge builds it): LatentMoE and two multi-token prediction depths of one layer
SUPER_PATTERN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                 "EMEMEMEM*EMEMEMEME")
SUPER = dict(hybrid_pattern=SUPER_PATTERN + "/*E/*E", hidden=4096, heads=32, kv_heads=2,
             head_dim=128, ffn=2688, moe_ffn=2688, shared_ffn=5376, moe_latent=1024,
             experts=512, top_k=22, gated_mlp=False, vocab=131072, tied_embeddings=False,
             mamba=dict(heads=128, head_dim=64, state=128, groups=8), mtp_repeated=True,
             position_embedding="none", sequence=8192, global_batch=512, dp=64, ep=64)


def test_nemotron_3_super_has_its_published_size_and_flop_count():
    """Its parameters are the element count of Megatron-Bridge's model verification card
    (123,611,033,088, but the router's expert biases and the final norm: 25,088), the
    repeated depth counted once; its FLOP count (the depths' layers and logits included)
    turns the 26.06 table's tokens per second into its model TFLOP/s."""
    shape = model_shape(parse_transformer(SUPER, "spec"))
    assert shape.parameters == 123_611_033_088 - 41 * 512 - 4096
    per_token = megatron(shape) / (512 * 8192)
    for tflops, tokens in ((817, 9652), (839, 9900), (571, 6742), (587, 6928), (667, 7867),
                           (689, 8131)):
        assert per_token == pytest.approx(tflops * 1e12 / tokens, rel=2e-3)


def test_latent_experts_work_on_latent_vectors():
    """LatentMoE: the router reads the hidden vector; the tokens cross the all-to-alls and
    the experts at the latent width, between a projection down and one up (each on the
    rank's tokens, forward, data and weight gradient)."""
    spec = dict(HYBRID, moe_latent=64, mamba=MAMBA)
    k, plain = (LayerKernels(parse_transformer(s, "spec")) for s in (spec, HYBRID))
    assert k.dispatch_bytes * H == plain.dispatch_bytes * 64
    fc1 = next(x for x in k.experts if isinstance(x, Gemm))
    assert (fc1.n, fc1.k) == (2 * 128, 64)   # gated: latent -> 2 x moe_ffn
    router = k.router[0]
    assert router.k == H
    n = k.moe_tokens
    assert [(g.m, g.n, g.k) for g in k.latent_down + k.latent_up] == [(n, 64, H), (n, H, 64)]
    assert len(k.latent_wgrad) == 2
    ops = _quiet(flowsim.load_network(NET), **spec).programs[0].ops

    def gemms(suffix):   # the GEMM shapes of the first op of a layer's given step
        op = next(op for op in ops if op.name.endswith(suffix))
        return [(g.m, g.n, g.k) for g in op.kernels if isinstance(g, Gemm)]

    # backward: the up projection's data gradient before the unpermute's, the down one's
    # after the permute's
    assert gemms(".unpermute_backward") == [(n, 64, H)]
    assert gemms(".permute_backward") == [(n, H, 64)]
    assert k.expert_parameters * H == plain.expert_parameters * 64
    assert k.dense_parameters - plain.dense_parameters == 2 * H * 64


def test_a_hybrid_model_s_depths_are_attention_and_experts(net):
    """'/*E' per depth: each depth an attention layer with its mixture of experts (the
    transformer's multi-token prediction layer); a repeated depth holds its weights once."""
    spec = dict(HYBRID, hybrid_pattern="M-M*-ME*E/*E/*E")
    parsed = parse_transformer(spec, "spec")
    assert parsed.mtp_layers == 2 and parsed.hybrid_mtp == "*E"
    assert parsed.mixer(parsed.layers) == "attention" and parsed.is_moe(parsed.layers + 1)
    w = _quiet(net, **spec)
    names = [op.name for op in w.programs[0].ops]
    assert any(".mtp0." in n and "attention" in n for n in names)
    assert any(".mtp1." in n and "dispatch" in n for n in names) or \
        any(".mtp1." in n and "experts" in n for n in names)
    k = LayerKernels(parse_transformer({**spec, "mtp_repeated": True}, "spec"))
    assert k.unit_parameters(parsed.layers + 1) == (0, 0, 0)
    assert sum(k.unit_parameters(parsed.layers)[:2]) > 0


def test_the_importers_read_latent_experts_and_the_depths():
    """Megatron-LM's --moe-latent-size and --mtp-use-repeated-layer with the depths written
    after the pattern; a Hugging Face config's moe_latent_size, num_nextn_predict_layers and
    mtp_hybrid_override_pattern."""
    from flowsim.workload.generators.huggingface import huggingface_keys
    from flowsim.workload.generators.megatron import megatron_keys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        keys = megatron_keys(
            "--num-layers 88 --hidden-size 4096 --num-attention-heads 32 --seq-length 8192 "
            "--global-batch-size 512 --num-experts 512 --moe-router-topk 22 --vocab-size 131072 "
            "--moe-ffn-hidden-size 2688 --moe-latent-size 1024 --mtp-num-layers 2 "
            f"--mtp-use-repeated-layer --hybrid-override-pattern {SUPER_PATTERN}/*E/*E", "t.sh")
    assert (keys["moe_latent"], keys["mtp_repeated"], keys["mtp_layers"]) == (1024, True, 2)
    spec = parse_transformer({**keys, "dp": 64, "ep": 64}, "s")
    assert (spec.hybrid_mtp, spec.layers) == ("*E", 88)
    hf = huggingface_keys({**NANO_HF, "moe_latent_size": 256, "num_nextn_predict_layers": 2,
                           "mtp_hybrid_override_pattern": "*E"}, "config.json")
    assert hf["moe_latent"] == 256 and hf["hybrid_pattern"] == NANO_PATTERN + "/*E/*E"
    with pytest.raises(ConfigError, match="key 'mtp_hybrid_override_pattern'"):
        huggingface_keys({**NANO_HF, "num_nextn_predict_layers": 1}, "config.json")


def test_nemotron_3_5_lightning_is_nano_with_a_repeated_depth():
    """Nemotron 3.5 Lightning, Nano's layers with two '*E' depths of one repeated layer: its
    model card's 32,913,266,240 parameters (less the routers' expert biases and the final
    norm: 24 x 128 + 2,688) and the 26.08 table's model TFLOP/s from its tokens per second."""
    shape = model_shape(_nano(hybrid_pattern=NANO_PATTERN + "/*E/*E", mtp_repeated=True))
    assert shape.parameters == 32_913_266_240 - 24 * 128 - 2688
    assert megatron(shape) / (512 * 8192) == pytest.approx(807e12 / 28672, rel=2e-3)


def test_the_bundled_workload_is_the_workloads_page_s_run():
    """``--workload nemotron3_nano`` (workloads/nemotron3_nano.yml) is the run the Training
    workloads page prices (and its test re-runs): the same keys."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "guide" / "workloads.md").read_text()
    section = page[page.index("### Hybrid models: Mamba-2 layers"):]
    run = next(b.split("\n", 1)[1] for b in section.split("```")[1::2]
               if b.startswith("yaml\n# run.yml"))
    bundled = yaml.safe_load((root / "workloads" / "nemotron3_nano.yml").read_text())
    assert bundled == yaml.safe_load(run)


def test_the_bundled_workload_runs_as_the_bundled_table_says():
    """The Bundled workloads table's row: its analytical and flow step times and shares."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "guide" / "workloads.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `nemotron3_nano`"))
    net = {"cluster": {"device": "b200_sxm", "nodes": 1}}
    for model in ("analytical", "flow"):
        ds = flowsim.simulate(net, "nemotron3_nano", model=model)
        share = float(ds.exposed_comm_ns.mean()) / float(ds.finish_ns.mean())
        assert f"{float(ds.time_ns) / 1e9:.2f} s, {100 * share:.1f}% exposed" in row, model
