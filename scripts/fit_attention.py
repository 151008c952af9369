"""Blackwell's fused-attention constants, fitted to cuDNN's published B200 speed curve.

    python scripts/fit_attention.py [--plot docs/accuracy/attention_b200.png]

NVIDIA's cuDNN frontend repository publishes the speed of cuDNN's fused attention on a B200
at every sequence length from 512 to 128K (``benchmark/sdpa_benchmark_bf16_training``,
results in ``artifacts/sdpa_benchmark_results_NVIDIA_B200.csv``, commit f937055,
2025-06-12): PyTorch's cuDNN SDPA backend, BF16, Llama 3.1 405B's attention (128 query
heads, 8 key-value heads, head dimension 128, the causal mask, one sequence per batch),
NGC PyTorch 25.05 with cuDNN 9.10.2, of the same spring as the NeMo 25.02-25.04 Blackwell
runs of the validation; FLOPs counted as flowsim counts them (the causal mask halves them, the
backward is 2.5 forwards).

This script fits flowsim's own attention model (:func:`flowsim.compute.attention.attention_ns`,
the same function the simulator prices with) to that curve, as the H100 constants were
fitted to the FlashAttention-3 paper's curves: over 512 to 16K tokens, least squares on
the log of the rate, the forward's rate and its per-block fixed work
(:attr:`~flowsim.compute.devices.Device.attention_block_keys`) together, then the
backward's rate with the same fixed work. Each pass of the benchmark is timed from its
Python call, so a fixed host overhead per call is fitted beside them (about 0.1 ms forward,
0.4 ms backward: the short sequences, 0.13 ms at 512 tokens, are nearly all overhead); a
training step launches its kernels ahead of the GPU and pays none of it. That overhead and
the fixed work per block both weigh most at short sequences, so the short lengths are fitted
least well (backward: +9% at 512 tokens, -12% at 1K; within 1.4% forward and 3.1% backward
from 2K to 32K). It prints the constants the B200 and GB200 presets carry and how the model
then follows the curve, and Blackwell Ultra's (GB300, B300): those rates times GB300's
speed-up over GB200 in cuDNN's curves of both measured the same day (April 2026, cuDNN
9.22; the same BF16 peak, so the ratio is the hardware's: its faster exponentials).
``--plot`` draws the curve beside the model (the kernel alone, as a training step runs it,
and with the benchmark's overhead) and beside the one rate the presets took before.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from scipy.optimize import least_squares

from flowsim._atomic import refuse_missing_folder, save_figure
from flowsim.compute.attention import attention_ns
from flowsim.compute.devices import B200_SXM, Device
from flowsim.workload.kernels import Attention

#: sequence length, forward and backward TFLOP/s of cuDNN (``pyt_cudnn`` rows) on B200
B200_CUDNN = (
    (512, 66.280, 43.512), (1024, 216.110, 178.132), (2048, 525.475, 383.705),
    (4096, 897.309, 709.138), (8192, 1211.140, 945.440), (16384, 1358.566, 1074.499),
    (32768, 1435.072, 1132.387), (65536, 1428.973, 1074.456),
    (131072, 1348.674, 1037.897))
#: cuDNN's fused attention on a GB200 and on a GB300 measured the same day with the same
#: cuDNN (9.22; cudnn-frontend ``benchmark/sdpa_benchmark_training/results/llama3.1/gb200``
#: and ``gb300``, 2026-04-24, added in fb682ce): BF16, causal, batch 2, 64 query heads, 8
#: key-value heads, dimension 128, the non-deterministic backward; sequence length, GB200
#: forward and backward, GB300 forward and backward TFLOP/s
BLACKWELL_ULTRA_CUDNN = (
    (2048, 1097.0, 885.0, 1373.0, 967.0), (4096, 1408.0, 1148.0, 1703.0, 1248.0),
    (8192, 1574.0, 1332.0, 1856.0, 1435.0), (16384, 1708.0, 1328.0, 1915.0, 1507.0),
    (32768, 1622.0, 1226.0, 1953.0, 1490.0))
#: the lengths fitted (those of the H100 fit: 512 to 16K)
FITTED = (512, 16384)
#: the benchmark's attention: Llama 3.1 405B's heads and head dimension
HEADS, KV_HEADS, HEAD_DIM = 128, 8, 128


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted constants: the forward's and backward's rates (fractions of the BF16 peak,
    as :attr:`~flowsim.compute.devices.Device.attention_forward` and ``_backward``), the
    per-block fixed work in keys, and the benchmark's host overhead per call (µs)."""

    forward: float
    backward: float
    block_keys: float
    forward_host_us: float
    backward_host_us: float


def modelled_tflops(device: Device, seq: int, backward: bool, host_us: float) -> float:
    """The rate the benchmark would report for flowsim's time of its kernel.

    Parameters
    ----------
    device : Device
        The preset (or a trial copy of it) pricing the kernel.
    seq : int
        Tokens per sequence (one sequence, the benchmark's heads, causal).
    backward : bool
        The backward pass (2.5 forwards of FLOPs) instead of the forward.
    host_us : float
        The benchmark's overhead per call (µs), in place of the kernel launch.

    Returns
    -------
    float
        TFLOP/s, the FLOPs counted as the benchmark counts them.
    """
    kernel = Attention(1, HEADS, seq, seq, HEAD_DIM, kv_heads=KV_HEADS, causal=True,
                       backward=backward)
    ns = attention_ns(device, kernel) - device.launch_us * 1e3 + host_us * 1e3
    return kernel.flops / ns / 1e3


def _residuals(device: Device, backward: bool, host_us: float) -> np.ndarray:
    """Log of the modelled over the published rate at each fitted length."""
    lo, hi = FITTED
    return np.array([np.log(modelled_tflops(device, seq, backward, host_us))
                     - np.log(bwd if backward else fwd)
                     for seq, fwd, bwd in B200_CUDNN if lo <= seq <= hi])


def fit() -> Fit:
    """Least squares on the log of the rate: the forward first, then the backward."""
    base = B200_SXM

    def forward(p: np.ndarray) -> np.ndarray:
        trial = dataclasses.replace(base, attention_forward=p[0], attention_block_keys=p[1])
        return _residuals(trial, False, p[2])

    f = least_squares(forward, [0.6, 200.0, 50.0], bounds=([0.1, 0.0, 0.0], [1.0, 1e4, 1e3]))
    keys = float(f.x[1])

    def backward(p: np.ndarray) -> np.ndarray:
        trial = dataclasses.replace(base, attention_backward=p[0], attention_block_keys=keys)
        return _residuals(trial, True, p[1])

    b = least_squares(backward, [0.5, 50.0], bounds=([0.1, 0.0], [1.0, 1e3]))
    return Fit(float(f.x[0]), float(b.x[0]), keys, float(f.x[2]), float(b.x[1]))


def blackwell_ultra_speedup() -> tuple[float, float]:
    """GB300's attention rate over GB200's (the same BF16 peak), forward and backward: the
    geometric mean over :data:`BLACKWELL_ULTRA_CUDNN`'s lengths."""
    table = np.array(BLACKWELL_ULTRA_CUDNN)
    forward = np.exp(np.mean(np.log(table[:, 3] / table[:, 1])))
    backward = np.exp(np.mean(np.log(table[:, 4] / table[:, 2])))
    return float(forward), float(backward)


#: the presets' attention before the fit: one rate at every length from the FlashAttention-4
#: paper's headline (0.71 / 1.3 forward; the backward at cuDNN's H100 ratio, 516 / 595) and
#: H100's fixed work: forward, backward, keys
HEADLINE = (0.55, round(0.55 * 516 / 595, 3), 198.0)


def plot(result: Fit, path: str) -> None:
    """The published curve, the fitted model and the headline rate, forward and backward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    forward, backward_rate, keys = HEADLINE
    before = dataclasses.replace(B200_SXM, attention_forward=forward,
                                 attention_backward=backward_rate, attention_block_keys=keys)
    seqs = [seq for seq, *_ in B200_CUDNN]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, backward, host in ((axes[0], False, result.forward_host_us),
                               (axes[1], True, result.backward_host_us)):
        ax.plot(seqs, [row[2 if backward else 1] for row in B200_CUDNN], "ko",
                label="cuDNN 9.10.2 on B200 (published)", zorder=3)
        ax.plot(seqs, [modelled_tflops(B200_SXM, s, backward, host) for s in seqs], "C0-",
                label="model + the benchmark's overhead per call (fitted)")
        ax.plot(seqs, [modelled_tflops(B200_SXM, s, backward, 0.0) for s in seqs], "C0--",
                label="model: the kernel alone (as a training step runs it)")
        ax.plot(seqs, [modelled_tflops(before, s, backward, 0.0) for s in seqs], "C3:",
                label="before: one rate from the FlashAttention-4 paper")
        ax.axvspan(FITTED[0], FITTED[1], color="0.92", zorder=0)
        ax.set(xscale="log", xlabel="tokens per sequence (causal, 128 heads, dim 128)",
               title=f"{'backward' if backward else 'forward'} (overhead per call {host:.0f} µs)")
        ax.set_xticks(seqs[::2], [f"{s // 1024}K" if s >= 1024 else str(s) for s in seqs[::2]])
    axes[0].set_ylabel("TFLOP/s (BF16)")
    axes[1].legend(fontsize=8, loc="lower right", frameon=False)
    fig.suptitle("Fused attention on B200: cuDNN's published curve and flowsim's fit "
                 "(shaded: the lengths fitted)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, option="--plot", dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", metavar="PNG", help="draw the curve and the model here")
    args = parser.parse_args(argv)
    refuse_missing_folder(parser, args.plot, "--plot")   # before fitting, not after
    result = fit()
    print(f"attention_forward={result.forward:.3f}, attention_backward={result.backward:.3f}, "
          f"attention_block_keys={result.block_keys:.0f} "
          f"(benchmark host overhead {result.forward_host_us:.0f} us forward, "
          f"{result.backward_host_us:.0f} us backward)")
    forward, backward = blackwell_ultra_speedup()
    print(f"Blackwell Ultra (GB300, B300): cuDNN {forward:.3f} x forward, {backward:.3f} x "
          f"backward of GB200's the same day: attention_forward="
          f"{result.forward * forward:.3f}, attention_backward={result.backward * backward:.3f}")
    print(f"{'tokens':>7} {'forward':>8} {'model':>7} {'backward':>9} {'model':>7}")
    for seq, fwd, bwd in B200_CUDNN:
        f = modelled_tflops(B200_SXM, seq, False, result.forward_host_us)
        b = modelled_tflops(B200_SXM, seq, True, result.backward_host_us)
        print(f"{seq:>7} {fwd:8.0f} {100 * (f / fwd - 1):+6.1f}% {bwd:9.0f} "
              f"{100 * (b / bwd - 1):+6.1f}%")
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
