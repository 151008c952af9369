"""FP8 attention (``fp8_attention``, Transformer Engine's ``fp8_dot_product_attention``): the
16-bit kernel's time over cuDNN's measured speed-up, and the casts of the attention's inputs
and output gradient. Checked against the measured points, by closed forms on the generated
kernels and by its bad specs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.compute.attention import attention_ns
from flowsim.compute.attention_fp8 import MEASURED, SEQUENCES, fp8_speedup, shape_class
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Attention, Quantize

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
H, HEADS, KV_HEADS, SEQ, LAYERS, MICRO = 256, 8, 2, 128, 2, 2
SPEC = dict(layers=LAYERS, hidden=H, heads=HEADS, kv_heads=KV_HEADS, ffn=4 * H, sequence=SEQ,
            micro_batch=1, vocab=0, tp=2, dp=8, global_batch=8 * MICRO, dtype="fp8",
            fp8_recipe="mxfp8")


def _kernel_ns(device, attention: Attention) -> float:
    return attention_ns(device, attention) - device.launch_us * 1e3


@pytest.mark.parametrize("preset, table", [("gb200", "gb200"), ("b200", "gb200"),
                                           ("gb300", "gb300"), ("b300", "gb300")])
@pytest.mark.parametrize("shape", [dict(heads=64, kv_heads=8, head_dim=128),
                                   dict(heads=128, kv_heads=128, head_dim=160),
                                   dict(heads=128, kv_heads=128, head_dim=64, window=128)])
@pytest.mark.parametrize("recipe", ["mxfp8", "tensorwise"])
@pytest.mark.parametrize("backward", [False, True])
def test_at_a_measured_length_the_kernel_runs_at_cudnn_s_measured_speed_up(
        preset, table, shape, recipe, backward):
    device = flowsim.compute.device(preset)
    for i, seq in enumerate(SEQUENCES):
        bf16 = Attention(2, seq_q=seq, seq_kv=seq, backward=backward, **shape)
        fp8 = replace(bf16, dtype="fp8", recipe=recipe)
        measured = MEASURED[(table, shape_class(bf16))]
        column = int(backward)
        ratio = measured["mxfp8" if recipe == "mxfp8" else "fp8"][i][column] / \
            measured["bf16"][i][column]
        assert _kernel_ns(device, bf16) / _kernel_ns(device, fp8) == pytest.approx(ratio)


def test_between_lengths_the_speed_up_is_linear_in_the_log_and_held_at_the_ends():
    a = Attention(2, 64, 4096, 4096, 128, 8, dtype="fp8", recipe="mxfp8")
    gb300 = flowsim.compute.device("gb300")
    at = {seq: fp8_speedup(gb300, replace(a, seq_q=seq, seq_kv=seq))
          for seq in (1024, 2048, 4096, 8192, 32768, 131072)}
    middle = fp8_speedup(gb300, replace(a, seq_q=int(4096 * math.sqrt(2)),
                                        seq_kv=int(4096 * math.sqrt(2))))
    assert middle == pytest.approx((at[4096] + at[8192]) / 2, rel=1e-3)
    assert at[1024] == at[2048] and at[131072] == at[32768]


def test_a_device_without_a_measurement_refuses_fp8_attention():
    a = Attention(2, 64, 4096, 4096, 128, 8, dtype="fp8", recipe="tensorwise")
    with pytest.raises(ConfigError, match="'fp8_attention'"):
        attention_ns(flowsim.compute.device("h100"), a)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def test_the_inputs_and_the_output_gradient_are_cast_and_the_kernels_are_fp8(net):
    """Per layer and micro-batch, one cast of the rank's queries, keys and values and one
    of its output's gradient, under the run's recipe; every attention kernel in FP8."""
    plain = transformer(net, **SPEC)
    fp8 = transformer(net, **SPEC, fp8_attention=True)

    def kernels(w, kind):
        return [k for op in w.programs[0].ops if op.kind == "compute" for k in op.kernels
                if isinstance(k, kind)]
    n, head_dim = SEQ, H // HEADS
    q, kv = HEADS // 2 * head_dim, KV_HEADS // 2 * head_dim
    added = sum(k.elements for k in kernels(fp8, Quantize)) - \
        sum(k.elements for k in kernels(plain, Quantize))
    assert added == (n * (q + 2 * kv) + n * q) * LAYERS * MICRO
    assert {(k.dtype, k.recipe) for k in kernels(fp8, Attention)} == {("fp8", "mxfp8")}
    assert {(k.dtype, k.recipe) for k in kernels(plain, Attention)} == {("bf16", "")}


@pytest.mark.parametrize("extra, key", [
    (dict(dtype="bf16", fp8_recipe="delayed"), "fp8_attention"),
    (dict(fp8_recipe="nvfp4"), "fp8_attention"),
    (dict(attention="flash2"), "attention"),
    (dict(attention="unfused"), "attention"),
])
def test_what_is_not_measured_or_not_run_in_fp8_is_refused(extra, key):
    assert_spec_refused({**SPEC, **extra, "fp8_attention": True}, key)


def test_megatron_s_flag_is_fp8_attention_and_is_refused_without_fp8():
    """``--fp8-dot-product-attention`` is ``fp8_attention``: with ``--fp8-format`` the
    attention kernels run in FP8; without it the run is refused in one line."""
    from test_importers import ARGS

    from flowsim.workload.generators.megatron import megatron_keys

    args = ARGS.replace("--tp-comm-overlap", "") + " --fp8-format hybrid --fp8-recipe mxfp8" \
        " --fp8-dot-product-attention"
    assert megatron_keys(args, "run.sh")["fp8_attention"] is True
    work = flowsim.load_workload({"generator": "megatron", "device": "gb200", "args": args},
                                 flowsim.load_network(NET))
    kernels = [k for p in work.programs for op in p.ops for k in op.kernels
               if isinstance(k, Attention)]
    assert kernels and {(k.dtype, k.recipe) for k in kernels} == {("fp8", "mxfp8")}
    with pytest.raises(ConfigError, match="'fp8_attention'"):
        flowsim.load_workload({"generator": "megatron", "args": ARGS +
                               " --fp8-dot-product-attention"}, flowsim.load_network(NET))
