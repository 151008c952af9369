"""Sliding-window attention (``window``, ``window_skip_freq``: Megatron-Core's
``window_size`` and ``window_attn_skip_freq``; Mistral, Gemma, GPT-OSS): the fused kernel's
work and time under the window by closed form, which layers attend through it, the
importers and the bad values."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import flowsim
from conftest import iteration_times
from flowsim import FlowsimWarning
from flowsim.compute.attention import attention_ns
from flowsim.compute.devices import DEVICES
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.nemo import nemo_keys
from flowsim.workload.generators.transformer import model_shape
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Attention

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
SPEC = dict(layers=4, hidden=256, heads=8, sequence=1024, micro_batch=1, vocab=0, tp=2,
            dp=8, sp=True, global_batch=8, gated_mlp=True)


@pytest.mark.parametrize("window", [1, 128, 1000])
def test_a_window_s_work_is_the_pairs_within_it(window):
    """Query i attends keys max(0, i - w + 1) .. i: s w - w (w - 1) / 2 pairs, which the
    kernel counts as s w - w^2 / 2 (as the causal count is s^2 / 2)."""
    s, full = 1024, Attention(2, 8, 1024, 1024, 64)
    windowed = Attention(2, 8, s, s, 64, window=window)
    pairs = s * window - window * window / 2
    assert windowed.flops == pytest.approx(full.flops * pairs / (s * s / 2), rel=1e-12)
    assert Attention(2, 8, s, s, 64, window=s).flops == full.flops   # the window is it all
    assert Attention(2, 8, s, s, 64, causal=False, window=window).flops == \
        Attention(2, 8, s, s, 64, causal=False).flops               # only causal windows


def test_the_kernel_time_visits_the_window_s_keys():
    """The compute model's stretch (a block's fixed work over the keys it visits) takes the
    keys within the window: time less the launch scales as FLOPs times stretch."""
    device = DEVICES["h100_sxm_80gb"]
    s, w = 8192, 512
    full, windowed = Attention(1, 32, s, s, 128), Attention(1, 32, s, s, 128, window=w)
    launch = device.launch_us * 1e3
    keys_w, fixed = w - w * w / (2 * s), device.attention_block_keys
    expected = windowed.flops / full.flops * ((keys_w + fixed) / keys_w) / (
        (s / 2 + fixed) / (s / 2))
    assert (attention_ns(device, windowed) - launch) / (attention_ns(device, full) - launch) \
        == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("layers", "experts", "total", "active"), [
    (36, 128, 117e9, 5.1e9), (24, 32, 21e9, 3.6e9)], ids=["gpt_oss_120b", "gpt_oss_20b"])
def test_gpt_oss_has_its_published_parameter_counts(layers, experts, total, active):
    """gpt-oss-120b and -20b (OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025: 117 B
    total, 5.1 B active; 21 B, 3.6 B; active counted without the embedding): banded windows
    of 128 on every other layer, 4 of the experts per token, grouped-query attention of
    64-wide heads (queries wider than the model)."""
    spec = dict(layers=layers, hidden=2880, heads=64, kv_heads=8, head_dim=64, sequence=4096,
                global_batch=1, ffn=2880, gated_mlp=True, experts=experts, top_k=4,
                moe_ffn=2880, vocab=201088, tied_embeddings=False, window=128,
                window_skip_freq=2)
    shape = model_shape(parse_transformer(spec, "gpt_oss"))
    embedding = 201088 * 2880
    assert shape.parameters == pytest.approx(total, rel=0.01)
    assert dataclasses.replace(shape, experts=4).parameters - embedding == \
        pytest.approx(active, rel=0.01)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _windows(program) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for op in program.ops:
        for k in op.kernels:
            if isinstance(k, Attention):
                out.setdefault(op.layer, set()).add(k.window)
    return out


@pytest.mark.parametrize(("freq", "windowed"), [
    (None, {0, 1, 2, 3}), (2, {0, 2}), (4, {0, 1, 2}), (1, set()), ([1, 1, 0, 0], {0, 1}),
    ("[0]*2+[1]*2", {2, 3}),
])
def test_layers_attend_through_the_window_as_megatron_s(net, freq, windowed):
    """``is_layer_window_attention``: an integer N makes the layers whose 1-based number is
    a multiple of N full attention; a list gives 1 (window) or 0 per layer."""
    program = transformer(net, **SPEC, window=128, window_skip_freq=freq).programs[0]
    assert _windows(program) == {i: {128 if i in windowed else 0} for i in range(4)}


def test_a_window_speeds_long_sequences_up(net):
    times = [float(flowsim.simulate(net, transformer(net, **SPEC, **extra)).time_ns)
             for extra in ({}, {"window": 1024}, {"window": 128, "window_skip_freq": 2},
                           {"window": 128})]
    assert times[0] == times[1] > times[2] > times[3]


@pytest.mark.parametrize(("extra", "key", "expected"), [
    ({"window": 128, "attention": "unfused"}, "window", "0 with attention: unfused"),
    ({"window": 128, "cp": 2, "dp": 4}, "window", "0 with cp=2"),
    ({"window": 128, "window_skip_freq": "[0]*4"}, "window_skip_freq", "at least one 1"),
    ({"window_skip_freq": 2}, "window_skip_freq", "unset without window"),
    ({"window": 128, "window_skip_freq": [1, 0]}, "window_skip_freq", "4 entries"),
    ({"window": -1}, "window", "an integer >= 0"),
])
def test_bad_values_name_the_key(extra, key, expected):
    with pytest.raises(ConfigError, match=rf"'{key}': expected {expected}"):
        parse_transformer({**SPEC, **extra}, "spec.yml")


def test_the_importers_read_it(net):
    args = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 1024 "
            "--micro-batch-size 1 --global-batch-size 8 --swiglu --ffn-hidden-size 1024 "
            "--bf16 --tensor-model-parallel-size 2 --sequence-parallel --vocab-size 0 "
            "--window-size (128,0) --window-attn-skip-freq 2")
    times = iteration_times(net, dict(SPEC, ffn=1024, window=128, window_skip_freq=2,
                                      generator="transformer", device="h100"),
                            {"generator": "megatron", "args": args, "device": "h100"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        with pytest.raises(ConfigError, match=r"--window-size: expected \(left, 0\)"):
            flowsim.simulate(net, {"generator": "megatron", "device": "h100",
                                   "args": args.replace("(128,0)", "128,64")})
    assert times[0] == times[1]
    config = {"trainer": {"num_nodes": 2, "devices": 8},
              "model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                        "window_size": [128, 0], "window_attn_skip_freq": 2}}
    keys = nemo_keys(config, "nemo.yml")
    assert (keys["window"], keys["window_skip_freq"]) == (128, 2)
