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
