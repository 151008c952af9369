"""The fused-attention model against the kernel measurements it was built from."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import flowsim
from flowsim.compute.attention import attention_ns
from flowsim.compute.attention_kernels import HEAD_DIMS, head_dim_efficiency, padded_head_dim
from flowsim.workload.kernels import Attention

#: Shah et al., "FlashAttention-3" (arXiv 2407.08608, 2024), forward speed on H100 SXM5,
#: BF16, head dimension 128, 16K tokens per batch (batch x sequence), 2,048 hidden (16 heads):
#: TFLOP/s at sequence lengths 512 ... 16K, with the causal mask (FLOPs counted halved)
CAUSAL_FORWARD = {
    "flash": (315, 410, 484, 518, 529, 539),    # cuDNN, the kernel Transformer Engine runs
    "flash2": (191, 260, 298, 319, 333, 335),   # FlashAttention-2
}
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)


def _tflops(implementation: str, seq: int, causal: bool) -> float:
    device = flowsim.compute.device("h100")
    kernel = Attention(16384 // seq, 16, seq, seq, 128, causal=causal,
                       implementation=implementation)
    return kernel.flops / (attention_ns(device, kernel) - device.launch_us * 1e3) / 1e3


@pytest.mark.parametrize("implementation", sorted(CAUSAL_FORWARD))
def test_causal_attention_follows_the_measured_curve(implementation):
    """At every length of the paper's figure the modelled causal forward is within 4% of
    the measured rate (the mask's fixed work per block weighs twice as much as without
    it, and the kernel keeps 0.975 of its unmasked rate); the model before this fit was
    8.5% slow at 512 tokens."""
    for seq, measured in zip(LENGTHS, CAUSAL_FORWARD[implementation]):
        assert _tflops(implementation, seq, True) == pytest.approx(measured, rel=0.04), seq


def test_the_causal_mask_costs_rate_at_every_length():
    """Causal kernels run slower per counted FLOP than unmasked ones of the same shape,
    and both approach their asymptote as the sequence grows."""
    for implementation in CAUSAL_FORWARD:
        causal = [_tflops(implementation, s, True) for s in LENGTHS]
        full = [_tflops(implementation, s, False) for s in LENGTHS]
        assert all(c < f for c, f in zip(causal, full))
        assert causal == sorted(causal) and full == sorted(full)


#: Dao, "FlashAttention-2" (arXiv 2307.08691, 2023), forward plus backward speed of
#: FlashAttention-2 at head dimension 128, 16K tokens per batch, 2,048 hidden: TFLOP/s at
#: sequence lengths 512 ... 16K (None: no bar). A100 SXM4 80GB: the paper's Figure 4 (b, d);
#: H100 SXM5: the same benchmark in the flash-attention repository's README
#: (``assets/flash2_h100_fwd_bwd_benchmark.png``). An independent source: the model's
#: constants come from the FlashAttention-3 paper's forward figures (H100) and the
#: FlashAttention-2 paper's peak fractions (A100).
FORWARD_BACKWARD = {
    ("a100", True): (99, 133, 155, 173, 182, 189),
    ("a100", False): (None, None, 187, 196, 201, 203),
    ("h100", True): (163, 221, 265, 294, 308, 328),
    ("h100", False): (248, 294, 320, 326, 335, 338),
}


@pytest.mark.parametrize("name, causal", sorted(FORWARD_BACKWARD))
def test_forward_plus_backward_follows_flashattention_2_s_own_figures(name, causal):
    """FlashAttention-2's forward and backward together, priced by the model, are within
    11% of the paper's measurement at every length (slow by 5-10% without the mask; by
    6-7% at 16K tokens with it)."""
    device = flowsim.compute.device(name)
    for seq, measured in zip(LENGTHS, FORWARD_BACKWARD[name, causal]):
        if measured is None:
            continue
        shape = dict(batch=16384 // seq, heads=16, seq_q=seq, seq_kv=seq, head_dim=128,
                     causal=causal, implementation="flash2")
        forward, backward = Attention(**shape), Attention(backward=True, **shape)
        seconds = sum(attention_ns(device, k) - device.launch_us * 1e3
                      for k in (forward, backward))
        modelled = (forward.flops + backward.flops) / seconds / 1e3
        assert modelled == pytest.approx(measured, rel=0.11), seq


#: FlashAttention-2's forward plus backward at head dimension 64 in the same two figures
#: (FlashAttention-2 paper, Figure 4 (a, c), A100; the repository's H100 benchmark): TFLOP/s
#: at 512 ... 16K tokens (None: the bar's label is hidden behind the legend)
FORWARD_BACKWARD_64 = {
    ("a100", True): (88, 119, 140, 156, 165, 171),
    ("a100", False): (132, None, 162, 171, 175, 176),
    ("h100", True): (141, 192, 232, 257, 273, 284),
    ("h100", False): (215, 254, 274, 288, 294, 296),
}


def _fwd_bwd_tflops(device, seq: int, head_dim: int, causal: bool) -> float:
    shape = dict(batch=16384 // seq, heads=2048 // head_dim, seq_q=seq, seq_kv=seq,
                 head_dim=head_dim, causal=causal, implementation="flash2")
    forward, backward = Attention(**shape), Attention(backward=True, **shape)
    seconds = sum(attention_ns(device, k) - device.launch_us * 1e3 for k in (forward, backward))
    return (forward.flops + backward.flops) / seconds / 1e3


@pytest.mark.parametrize("name, causal", sorted(FORWARD_BACKWARD_64))
def test_head_dimension_64_follows_flashattention_2_s_figures(name, causal):
    """At head dimension 64 FlashAttention-2 runs at 0.88 of its rate at 128; the model
    priced that way is within 12% of the figures at every length, and below the rate it
    gives at 128 (the figures' own order). The 0.88 is the mean of these figures' ratios at
    16K tokens, so 512 to 8K are the check; 12% is the model's own spread at 128 (within 11%
    of the same figures), not a margin fitted here (the worst point is 11.6%, A100 without
    the mask at 512 tokens)."""
    device = flowsim.compute.device(name)
    for seq, measured in zip(LENGTHS, FORWARD_BACKWARD_64[name, causal]):
        modelled = _fwd_bwd_tflops(device, seq, 64, causal)
        assert modelled < _fwd_bwd_tflops(device, seq, 128, causal)
        if measured is not None:
            assert modelled == pytest.approx(measured, rel=0.12), seq


#: Forward TFLOP/s on H100 at 4K, 8K and 16K tokens (16K tokens per batch, 2,048 hidden) at
#: head dimensions 64 and 256: the FlashAttention-3 paper's forward figure (the repository's
#: ``assets/flash3_fp16_fwd.png``), for FlashAttention-2 and cuDNN (``flash`` on H100)
FORWARD_OTHER_DIMS = {
    ("flash2", 64, False): (321, 322, 324), ("flash2", 64, True): (284, 295, 299),
    ("flash2", 256, False): (323, 324, 326), ("flash2", 256, True): (293, 297, 298),
    ("flash", 64, False): (408, 412, 413), ("flash", 64, True): (363, 379, 388),
    ("flash", 256, False): (581, 580, 581), ("flash", 256, True): (483, 497, 509),
}


@pytest.mark.parametrize("implementation, head_dim, causal", sorted(FORWARD_OTHER_DIMS))
def test_forward_at_head_dimensions_64_and_256(implementation, head_dim, causal):
    """Both kernels at both other head dimensions, 4K tokens and longer: within 10% (the
    worst, 9.1%, cuDNN at 256 with the mask at 4K). The 16K points are those the ratios
    were read at; 4K and 8K are the check."""
    device = flowsim.compute.device("h100")
    for seq, measured in zip((4096, 8192, 16384), FORWARD_OTHER_DIMS[implementation,
                                                                      head_dim, causal]):
        kernel = Attention(16384 // seq, 2048 // head_dim, seq, seq, head_dim, causal=causal,
                           implementation=implementation)
        modelled = kernel.flops / (attention_ns(device, kernel) - device.launch_us * 1e3) / 1e3
        assert modelled == pytest.approx(measured, rel=0.10), seq


def test_a_padded_head_dimension_pays_for_the_padding():
    """FlashAttention-2 runs head dimension 80 in its 96 kernel and 160 in its 192 one: the
    same time as the larger dimension; cuDNN takes multiples of 8 as they are."""
    a100, h100 = flowsim.compute.device("a100"), flowsim.compute.device("h100")

    def ns(device, head_dim, implementation="flash"):
        return attention_ns(device, Attention(2, 32, 4096, 4096, head_dim,
                                              implementation=implementation))
    assert ns(a100, 80) == pytest.approx(ns(a100, 96))
    assert ns(h100, 160, "flash2") == pytest.approx(ns(h100, 192, "flash2"))
    assert ns(h100, 80) < ns(h100, 96) < ns(h100, 128)
    assert head_dim_efficiency("flash2", 128) == head_dim_efficiency("cudnn", 128) == 1.0
    assert padded_head_dim("flash2", 72) == 96 and padded_head_dim("cudnn", 72) == 72


@given(kernel=st.sampled_from(sorted(HEAD_DIMS)), head_dim=st.integers(8, 255))
def test_a_wider_head_never_takes_less_time(kernel, head_dim):
    """The time of the same heads over the same tokens never falls as the head dimension
    grows (a padded dimension costs what the padding does), and padding lands on a
    dimension the kernel is built for."""
    def ns(d):   # time per head-token pair, up to a constant: d / efficiency
        return d / head_dim_efficiency(kernel, d)
    assert ns(head_dim + 1) >= ns(head_dim) * (1 - 1e-12)
    padded = padded_head_dim(kernel, head_dim)
    assert padded >= head_dim and padded_head_dim(kernel, padded) == padded


def test_a_device_names_only_a_kernel_with_head_dimension_rates():
    from flowsim.compute.devices import Device
    h100 = flowsim.compute.device("h100")
    with pytest.raises(flowsim.ConfigError, match="attention_kernel.*flash2, cudnn.*fa3"):
        dataclasses.replace(h100, attention_kernel="fa3")
    assert isinstance(dataclasses.replace(h100, attention_kernel="flash2"), Device)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(flowsim.ConfigError, match="attention_block_keys.*finite.*>= 0"):
            dataclasses.replace(h100, attention_block_keys=bad)


def _fit_attention():
    """``scripts/fit_attention.py`` as a module (loaded from its file, ``sys.path`` left be;
    registered, as its dataclass needs, once)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "fit_attention" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "scripts" / "fit_attention.py"
        spec = importlib.util.spec_from_file_location("fit_attention", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["fit_attention"] = module
        spec.loader.exec_module(module)
    return sys.modules["fit_attention"]


def test_blackwell_presets_carry_the_fit_of_cudnn_s_b200_curve():
    """B200's and GB200's attention constants are what ``scripts/fit_attention.py`` fits to
    cuDNN's published B200 curve, to the presets' rounding (a constant edited by hand, or a
    model change that moves the fit, fails here)."""
    fit = _fit_attention().fit()
    for name in ("b200", "gb200"):
        device = flowsim.compute.device(name)
        assert device.attention_kernel == "cudnn"
        assert device.attention_forward == round(fit.forward, 3)
        assert device.attention_backward == round(fit.backward, 3)
        assert device.attention_block_keys == round(fit.block_keys)
    assert flowsim.compute.device("h100").attention_block_keys == 198   # the H100 fit's


def test_blackwell_ultra_presets_carry_cudnn_s_same_day_speed_up_over_gb200():
    """GB300's and B300's attention is Blackwell's fit times GB300's speed-up over GB200 in
    cuDNN's curves of both measured the same day (1.19 forward, 1.12 backward: the same BF16
    peak, so the hardware's faster exponentials), to the presets' rounding; the fixed work
    per block is Blackwell's. At 16K tokens the GB300 model runs faster than the GB200 one
    by that speed-up, within a percent (the fixed work weighs the same on both)."""
    fa = _fit_attention()
    fit = fa.fit()
    forward, backward = fa.blackwell_ultra_speedup()
    assert 1.15 < forward < 1.25 and 1.08 < backward < 1.16
    for name in ("b300", "gb300"):
        device = flowsim.compute.device(name)
        assert device.attention_forward == round(fit.forward * forward, 3)
        assert device.attention_backward == round(fit.backward * backward, 3)
        assert device.attention_block_keys == round(fit.block_keys)
    gb200, gb300 = flowsim.compute.device("gb200"), flowsim.compute.device("gb300")
    for is_backward, speedup in ((False, forward), (True, backward)):
        kernel = Attention(2, 64, 16384, 16384, 128, kv_heads=8, backward=is_backward)
        assert attention_ns(gb200, kernel) / attention_ns(gb300, kernel) == pytest.approx(
            speedup, rel=0.01)


def test_blackwell_attention_follows_cudnn_s_b200_curve():
    """With the benchmark's host overhead per call (fitted beside the constants), the model
    is within 1.5% of every forward and 3.5% of every backward rate from 2K to 32K tokens
    (16K is the last length fitted: 32K is a check), and the rates it gives, forward and
    backward, grow with the length where the measured ones do (to 32K)."""
    fa = _fit_attention()
    fit, b200 = fa.fit(), flowsim.compute.device("b200")
    forwards, backwards = [], []
    for seq, forward, backward in fa.B200_CUDNN:
        f = fa.modelled_tflops(b200, seq, False, fit.forward_host_us)
        b = fa.modelled_tflops(b200, seq, True, fit.backward_host_us)
        if 2048 <= seq <= 32768:
            assert f == pytest.approx(forward, rel=0.015), seq
            assert b == pytest.approx(backward, rel=0.035), seq
            forwards.append(f)
            backwards.append(b)
    assert forwards == sorted(forwards) and backwards == sorted(backwards)


#: cuDNN's fused attention on H200 (GH100, H100's die and clocks: locked at 1,980 MHz, 700 W)
#: with cuDNN 9.1.0, BF16, head dimension 128, 16 heads, 16K to 64K tokens per batch: NVIDIA's
#: cuDNN frontend repository, ``benchmark/benchmark_results.csv`` as added in b740542
#: (2024-05-07); (batch, sequence, causal forward TFLOP/s, causal backward TFLOP/s)
H200_CUDNN_9_1_CAUSAL = ((4, 4096, 542.3, 443.6), (2, 8192, 572.9, 463.5),
                         (1, 16384, 586.8, 497.7), (1, 32768, 577.3, 499.7),
                         (1, 65536, 567.0, 503.8))


def test_h100_attention_follows_cudnn_s_own_h200_curve():
    """An independent check of the H100 preset, whose constants come from the
    FlashAttention-3 paper's figures: cuDNN's own benchmark of the same kernel on the same
    die (May 2024), causal as every LLM trains. The
    model is within 7% forward and backward from 4K to 64K tokens (forward -6.5% to +0.1%).
    Without the mask it is slower than this benchmark by 3-16% forward, 5-8% backward: its
    unmasked rate is the paper's (595 TFLOP/s at 16K) where this benchmark measured 642."""
    h200 = flowsim.compute.device("h200")
    for batch, seq, forward, backward in H200_CUDNN_9_1_CAUSAL:
        for is_backward, measured in ((False, forward), (True, backward)):
            kernel = Attention(batch, 16, seq, seq, 128, backward=is_backward)
            ns = attention_ns(h200, kernel) - h200.launch_us * 1e3
            assert kernel.flops / ns / 1e3 == pytest.approx(measured, rel=0.07), (seq,
                                                                                 is_backward)


def test_the_fit_script_refuses_a_plot_in_a_missing_folder_before_fitting(tmp_path, capsys):
    """``fit_attention.py --plot`` names the option and the folder, in one line, and writes
    nothing; into a folder that exists it writes the figure."""
    fa = _fit_attention()
    with pytest.raises(SystemExit) as exit_:
        fa.main(["--plot", str(tmp_path / "missing" / "b200.png")])
    assert exit_.value.code == 2
    assert "argument --plot: folder" in capsys.readouterr().err
    fa.main(["--plot", str(tmp_path / "b200.png")])   # matplotlib: a test dependency
    assert (tmp_path / "b200.png").stat().st_size > 10_000
