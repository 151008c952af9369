"""The transformer's memory estimate per GPU, checked against the closed forms it comes
from: Korthikanti et al. (MLSys 2023), Table 2, for the activations of GPT's layer, and
Megatron-LM's bytes per parameter with and without the distributed optimizer; the pipeline
schedule's micro-batches in flight; and what the run reports."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.cli import main
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import NVFP4_BYTES, Elementwise

#: one node of 8 GPUs
NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
S, B, H, A, L = 1024, 2, 1024, 16, 4     # sequence, micro-batch, hidden, heads, layers
#: GPT's layer (MHA, 4h MLP without gating), no vocabulary: the activations are the layers'
GPT = dict(layers=L, hidden=H, heads=A, sequence=S, micro_batch=B, vocab=0)


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def _activations(node, **keys) -> float:
    return transformer(node, **GPT, **keys).memory["activations"]


@pytest.mark.parametrize("t", [1, 4, 8])
def test_the_activations_of_gpt_s_layer_are_korthikanti_s(node, t):
    """Per layer and micro-batch (Table 2): no parallelism beyond TP, unfused attention,
    no recomputation: s b h (10 + 24/t + 5 a s / (h t)); with sequence parallelism and
    selective recomputation (or flash attention): 34 s b h / t; with full recomputation
    only the layer's input, 2 s b h / t, plus one layer's activations while it is
    recomputed."""
    sbh, dp = S * B * H, 8 // t
    plain = _activations(node, tp=t, dp=dp, micro_batches=1, attention="unfused")
    assert plain == pytest.approx(L * sbh * (10 + 24 / t + 5 * A * S / (H * t)))
    if t == 1:
        return
    for keys in (dict(attention="unfused", recompute="selective"), dict(attention="flash")):
        assert _activations(node, tp=t, dp=dp, micro_batches=1, sp=True, **keys) == \
            pytest.approx(L * 34 * sbh / t)
    full = _activations(node, tp=t, dp=dp, micro_batches=1, sp=True, recompute="full")
    assert full == pytest.approx(L * 2 * sbh / t + 34 * sbh / t)


def test_context_parallelism_splits_the_sequence(node):
    one = _activations(node, tp=2, dp=4, micro_batches=1, sp=True)
    assert _activations(node, tp=2, cp=2, dp=2, micro_batches=1, sp=True) == \
        pytest.approx(one / 2)


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 2), (2, 8)])
def test_a_1f1b_stage_holds_its_warm_up_micro_batches(pp, m):
    """Under 1F1B stage k keeps min(pp - k, m) micro-batches in flight: the first stage
    holds the most, and the estimate is its."""
    net = flowsim.load_network(dict(NODE, npus_count=[pp]))
    w = transformer(net, **dict(GPT, layers=pp * 2), tp=1, pp=pp, dp=1, micro_batches=m,
                    sp=False)
    per_stage = 2 * S * B * H * 34   # two layers, flash attention, no TP
    assert w.memory["stage"] == 0
    assert w.memory["activations"] == pytest.approx(min(pp, m) * per_stage)


def test_bytes_per_parameter_are_megatron_s(node):
    """Without the distributed optimizer 2 + 4 + 12 = 18 bytes per parameter (16-bit
    weights, FP32 gradients, FP32 master weights and Adam's moments); with it the 12
    optimizer bytes are split over the data-parallel ranks; BF16 gradient reduction keeps
    2-byte gradients; FSDP splits the weights and gradients too (but for two gathered
    layers)."""
    layer = 4 * H * H + 2 * H * 4 * H + 2 * H     # GPT's layer: attention, MLP, two norms
    p = L * layer                                 # tp 1: all of it on each GPU
    ddp = transformer(node, **GPT, dp=8, micro_batches=1).memory
    assert (ddp["weights"], ddp["gradients"], ddp["optimizer"]) == (2 * p, 4 * p, 12 * p)
    zero1 = transformer(node, **GPT, dp=8, micro_batches=1, distributed_optimizer=True,
                        grad_reduce_in_bf16=True).memory
    assert (zero1["weights"], zero1["gradients"]) == (2 * p, 2 * p)
    assert zero1["optimizer"] == pytest.approx(12 * p / 8)
    fsdp = transformer(node, **GPT, dp=8, micro_batches=1, fsdp=True).memory
    assert fsdp["weights"] == pytest.approx(2 * (p / 8 + 2 * layer))
    assert fsdp["gradients"] == pytest.approx(4 * (p / 8 + 2 * layer))
    assert fsdp["total"] == pytest.approx(sum(fsdp[k] for k in ("weights", "gradients",
                                                                 "optimizer", "activations")))


def test_the_run_reports_the_estimate_beside_the_device_s_memory(tmp_path, capsys):
    """``flowsim run --json``: ``memory_gib`` (2^30 B), its parts and stage, and the
    device's memory when the compute model is a device preset (a vendor's 80 GB of HBM
    being 80 GiB)."""
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: transformer\nlayers: 4\nhidden: 1024\nheads: 16\n"
                    "sequence: 1024\nmicro_batch: 2\nvocab: 0\ntp: 8\nsp: true\n"
                    "micro_batches: 1\ndevice: h100\n")
    net = tmp_path / "net.yml"
    net.write_text("topology: [Switch]\nnpus_count: [8]\nbandwidth: [300]\nlatency: [500]\n")
    assert main(["run", "--workload", str(spec), "--network", str(net), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = transformer(flowsim.load_network(NODE), **GPT, tp=8, sp=True,
                           micro_batches=1).memory
    assert out["memory_gib"] == pytest.approx(expected["total"] / 2**30)
    assert out["memory"]["activations"] == pytest.approx(expected["activations"] / 2**30)
    assert out["memory"]["stage"] == 0 and out["memory_capacity_gib"] == 80.0
    assert main(["run", "--workload", str(spec), "--network", str(net)]) == 0
    printed = capsys.readouterr().out
    assert " of 80 GiB per NPU" in printed and "DOES NOT FIT" not in printed
    spec.write_text("generator: transformer\nlayers: 80\nhidden: 8192\nheads: 64\n"
                    "sequence: 8192\nmicro_batch: 4\nvocab: 0\ntp: 8\nsp: true\n"
                    "micro_batches: 1\ndevice: h100\n")   # 220 GiB: Adam's FP32 states
    assert main(["run", "--workload", str(spec), "--network", str(net)]) == 0
    assert "GiB per NPU at the peak" in (printed := capsys.readouterr().out)
    assert "DOES NOT FIT the device's memory" in printed


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]),
       m=st.integers(1, 4), sp=st.booleans(), vocab=st.sampled_from([0, 5000]),
       recompute=st.sampled_from(["none", "selective", "full"]),
       layers=st.sampled_from([4, 8]))
def test_sharding_and_recomputation_only_ever_save_memory(tp, pp, m, sp, vocab, recompute,
                                                           layers):
    """For any layout: the parts are positive and add up to the total; the distributed
    optimizer never needs more than Megatron's plain DDP, FSDP (without pipelining, where
    it shards the weights and gradients) never more than the distributed optimizer; full
    recomputation never more activations than none; a larger micro-batch never less."""
    dp = 8 // (tp * pp)
    if dp < 1:
        return
    net = flowsim.load_network(NODE)

    def memory(**keys):
        base = dict(GPT, layers=layers, vocab=vocab, tp=tp, pp=pp, dp=dp, sp=sp and tp > 1,
                    micro_batches=m, recompute=recompute)
        base.update(keys)
        return transformer(net, **base).memory

    ddp, zero1 = memory(), memory(distributed_optimizer=True)
    for mem in (ddp, zero1):
        parts = [mem[k] for k in ("weights", "gradients", "optimizer", "activations")]
        assert all(p > 0 for p in parts) and mem["total"] == pytest.approx(sum(parts))
    assert zero1["total"] <= ddp["total"]
    if pp == 1 and dp > 2:
        assert memory(fsdp=True)["total"] <= zero1["total"]
    assert memory(recompute="full")["activations"] <= memory(recompute="none")["activations"]
    assert memory(micro_batch=2 * B)["activations"] >= ddp["activations"]


@pytest.mark.parametrize("recipe, low, proj", [("tensorwise", 1.0, 0), ("mxfp8", 1.0, 0),
                                               ("nvfp4", NVFP4_BYTES, 0), ("delayed", 1.0, 1)])
def test_fp8_layers_keep_the_quantized_copies_of_their_inputs(node, recipe, low, proj):
    """Transformer Engine keeps a quantized linear layer's input for its weight gradient in
    the recipe's bytes: the norms' outputs QKV and FC1 read and FC2's input shrink to
    ``low``; under delayed scaling alone the projection keeps its own copy beside the
    attention's 16-bit output (Megatron-Core has it keep that output otherwise): per layer
    ``n (2h + f) (2 - low) - proj n h low`` fewer bytes than in BF16 (GPT's f = 4h)."""
    n, f = S * B, 4 * H
    bf16 = _activations(node, dtype="bf16", dp=8, micro_batches=1)
    quantized = _activations(node, dtype="fp8", fp8_recipe=recipe, dp=8, micro_batches=1)
    assert bf16 - quantized == pytest.approx(
        L * (n * (2 * H + f) * (2 - low) - proj * n * H * low))
    if recipe == "delayed":   # (Megatron-Core keeps no layer in BF16 under it)
        return
    # a layer kept in 16 bits keeps 16-bit inputs
    first_bf16 = _activations(node, dtype="fp8", fp8_recipe=recipe, bf16_layers_at_start=1,
                              dp=8, micro_batches=1)
    assert first_bf16 - quantized == pytest.approx((bf16 - quantized) / L)


def test_nvfp4_norm_outputs_keep_both_layouts_under_sequence_parallelism(node):
    """Gathered for the QKV and FC1 GEMMs, an NVFP4 norm output is kept in both layouts."""
    n, f, t = S * B, 4 * H, 2
    keys = dict(tp=t, sp=True, dp=4, micro_batches=1)
    bf16 = _activations(node, dtype="bf16", **keys)
    nvfp4 = _activations(node, dtype="fp8", fp8_recipe="nvfp4", **keys)
    norms, fc2 = 2 * n * H / t * (2 - 2 * NVFP4_BYTES), n * f / t * (2 - NVFP4_BYTES)
    assert bf16 - nvfp4 == pytest.approx(L * (norms + fc2))


@pytest.mark.parametrize("recipe, copies", [("tensorwise", 0), ("delayed", 1)])
def test_fp8_experts_keep_their_inputs_quantized_and_moe_act_drops_them(node, recipe, copies):
    """A mixture of experts in FP8 keeps its experts' FC1 and FC2 inputs in one byte and
    the norm output the 16-bit router reads in two; under delayed scaling the shared
    experts' FC1 and the projection keep their own copies; recomputing the activation
    (``moe_act``, not under delayed scaling) drops FC2's inputs as they were kept (one
    layer's are made again at a time)."""
    moe = dict(experts=8, top_k=2, ep=8, dp=8, moe_ffn=512, shared_ffn=256, gated_mlp=True,
               global_batch=16)
    n = S * B
    rows = n * 2   # top_k copies of each token, all on the rank's one expert
    bf16 = _activations(node, **moe, dtype="bf16")
    fp8 = _activations(node, **moe, dtype="fp8", fp8_recipe=recipe)
    per_layer = (n * H                 # the attention's norm output (QKV's input)
                 + rows * H            # the experts' FC1 inputs
                 + rows * 512          # the experts' FC2 inputs
                 + n * 256             # the shared experts' FC2 input
                 - copies * 2 * n * H)   # the projection's and shared FC1's own copies
    assert bf16 - fp8 == pytest.approx(L * per_layer)
    if recipe == "delayed":
        return
    act = _activations(node, **moe, dtype="fp8", fp8_recipe=recipe,
                       recompute="selective", recompute_modules=["moe_act"])
    assert fp8 - act == pytest.approx((L - 1) * rows * 512 * 1.0)


def test_torchao_s_float8_linear_keeps_the_16_bit_inputs(node):
    """torchao's Float8Linear (torchtitan's FP8) saves its high-precision input: the
    activations are BF16's; Transformer Engine's would be smaller."""
    keys = dict(dp=8, micro_batches=1)
    bf16 = _activations(node, dtype="bf16", **keys)
    torchao = _activations(node, dtype="fp8", fp8_recipe="tensorwise", fp8_library="torchao",
                           **keys)
    assert torchao == bf16 > _activations(node, dtype="fp8", fp8_recipe="tensorwise", **keys)


@pytest.mark.parametrize("experts", [0, 8])
def test_an_fp8_activation_input_store_keeps_swiglu_s_input_in_one_byte(node, experts):
    """``activation_func_fp8_input_store`` (Megatron-Core's ``BiasSwiGLUFunction``) keeps
    FC1's output, SwiGLU's ``2 f`` wide input, in FP8: per layer one byte fewer per element
    (a dense MLP's, and with experts the routed experts' and the shared experts'); its casts
    to FP8 after the forward and back before the backward move 3 bytes per element each."""
    n, f = S * B, 4 * H
    keys = dict(gated_mlp=True, ffn=f, dp=8, micro_batches=1)
    if experts:
        del keys["micro_batches"]
        keys.update(experts=experts, top_k=2, ep=8, moe_ffn=512, shared_ffn=256,
                    global_batch=16)
    kept = n * 2 * f if not experts else n * 2 * 2 * 512 + n * 2 * 256
    plain, stored = (transformer(node, **GPT, **keys, activation_func_fp8_input_store=on)
                     for on in (False, True))
    assert plain.memory["activations"] - stored.memory["activations"] == \
        pytest.approx(L * kept)
    casts = [k.bytes for op in stored.programs[0].ops if op.kind == "compute"
             for k in op.kernels if isinstance(k, Elementwise)
             and k.name.startswith("activation_input_")]
    assert len(casts) == 2 * L * (2 if experts else 1)   # (the shared experts: their own)
    assert sum(casts) == pytest.approx(2 * L * 3 * kept)
    assert not any(k.name.startswith("activation_input_")
                   for op in plain.programs[0].ops if op.kind == "compute"
                   for k in op.kernels if isinstance(k, Elementwise))


@pytest.mark.parametrize("case", ["moe_act", "fused"])
def test_the_experts_keep_16_bits_where_their_activation_has_no_fp8_store(node, case):
    """Recomputing the experts' activation (``moe_act``: the checkpoint keeps FC1's 16-bit
    output; the FP8 copy lives through the re-run, which casts again) or Transformer Engine's
    fused grouped MLP (no FP8 store in its ``ScaledSwiGLU``, no casts) leaves the routed
    experts' activation input in 16 bits: only the shared experts' shrinks."""
    n = S * B
    keys = dict(gated_mlp=True, dp=8, experts=8, top_k=2, ep=8, moe_ffn=512, shared_ffn=256,
                global_batch=16)
    keys.update(dict(recompute="selective", recompute_modules=["moe_act"]) if case == "moe_act"
                else dict(dtype="fp8", fp8_recipe="mxfp8", fused_grouped_mlp=True))
    plain, stored = (transformer(node, **GPT, **keys, activation_func_fp8_input_store=on)
                     for on in (False, True))
    assert plain.memory["activations"] - stored.memory["activations"] == \
        pytest.approx(L * n * 2 * 256)
    casts = [k.name for op in stored.programs[0].ops if op.kind == "compute"
             for k in op.kernels if isinstance(k, Elementwise)
             and k.name.startswith("activation_input_")]
    # per layer: the shared experts' two; with moe_act the experts' forward, re-run, backward
    assert len(casts) == L * (5 if case == "moe_act" else 2)


def test_an_fp8_activation_input_store_needs_swiglu(node):
    """Megatron-Core stores only SwiGLU's input in FP8: one line naming the key."""
    with pytest.raises(flowsim.ConfigError, match="activation_func_fp8_input_store.*gated_mlp"):
        transformer(node, **GPT, dp=8, micro_batches=1, activation_func_fp8_input_store=True)
