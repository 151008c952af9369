"""FP8 fused attention (Transformer Engine's ``fp8_dot_product_attention``): cuDNN's kernel
with its inputs in FP8, priced as the 16-bit kernel's time over the speed-up cuDNN measured.

NVIDIA's cuDNN frontend repository publishes, for GB200 and GB300 on the same day and cuDNN
(9.22, 2026-04-24; ``benchmark/sdpa_benchmark_training/results/{llama3.1,dsv3,gpt_oss}/``,
added in commit fb682ce), the speed of its training attention in BF16, in FP8 with one scale
per tensor and in MXFP8, forward and (non-deterministic) backward, causal, at 2K to 32K
tokens, for three shapes:

- Llama 3.1's: 64 query heads, 8 key-value heads, head dimension 128;
- DeepSeek-V3's latent attention: 128 heads, 192 query-key and 128 value dimensions;
- GPT-OSS's sliding window: 128 heads of 64 dimensions, a window of 128 keys.

FP8 is not uniformly faster. On Llama's shape MXFP8's backward is slower than BF16's below
16K tokens (GB300 at 4K: forward 1.33 times BF16's rate, backward 0.92); on DeepSeek-V3's
wider heads both directions gain (1.58 and 1.33); under a sliding window the FP8 backward
visits every causal key (its time grows with the square of the sequence), 0.24 times BF16's
rate at 4K. A kernel takes the speed-up of its shape's class (windowed; head dimension above
128; the rest), read at its sequence length from the measured points (linear in the
logarithm of the length, held at the ends), and of its device's table (B200 takes GB200's,
B300 GB300's: the same chips); a device without a table refuses FP8 attention.
"""

from __future__ import annotations

import math

from ..errors import config_error
from ..workload.kernels import Attention
from .devices import Device

#: sequence lengths of the measurements
SEQUENCES = (2048, 4096, 8192, 16384, 32768)

#: TFLOP/s (forward, backward) at :data:`SEQUENCES`, per device table, shape class and
#: precision (``fp8``: one scale per tensor; ``mxfp8``: Transformer Engine's MXFP8), from
#: the CSV files named in the module docstring (``top_left`` mask, ``deterministic_bwd``
#: False)
MEASURED: dict[tuple[str, str], dict[str, tuple[tuple[float, float], ...]]] = {
    ("gb200", "gqa128"): {
        "bf16": ((1097, 885), (1408, 1148), (1574, 1332), (1708, 1328), (1622, 1226)),
        "fp8": ((1420, 831), (1805, 1178), (2047, 1454), (2154, 1632), (2197, 1687)),
        "mxfp8": ((1330, 745), (1685, 1054), (1902, 1287), (1999, 1436), (2046, 1425))},
    ("gb300", "gqa128"): {
        "bf16": ((1373, 967), (1703, 1248), (1856, 1435), (1915, 1507), (1953, 1490)),
        "fp8": ((1954, 944), (2532, 1396), (2897, 1781), (3054, 2035), (3108, 2128)),
        "mxfp8": ((1751, 811), (2272, 1143), (2570, 1404), (2727, 1563), (2785, 1590))},
    ("gb200", "mla192"): {
        "bf16": ((1072, 846), (1406, 1057), (1585, 1193), (1678, 1134), (1743, 1076)),
        "fp8": ((1659, 1312), (2095, 1692), (2397, 1959), (2486, 1968), (2447, 1857)),
        "mxfp8": ((1535, 1047), (1925, 1364), (2219, 1494), (2355, 1552), (2329, 1532))},
    ("gb300", "mla192"): {
        "bf16": ((1285, 914), (1590, 1143), (1825, 1291), (1967, 1302), (1991, 1289)),
        "fp8": ((2290, 1511), (2788, 1982), (3128, 2310), (3305, 2459), (3364, 2406)),
        "mxfp8": ((2069, 1158), (2517, 1522), (2829, 1780), (2998, 1844), (2959, 1863))},
    ("gb200", "window"): {
        "bf16": ((153, 176), (161, 182), (165, 187), (167, 188), (104, 186)),
        "fp8": ((165, 78), (173, 49), (177, 28), (179, 15), (179, 8)),
        "mxfp8": ((153, 65), (161, 41), (164, 23), (166, 12), (168, 6))},
    ("gb300", "window"): {
        "bf16": ((160, 184), (167, 191), (172, 198), (173, 200), (108, 199)),
        "fp8": ((193, 89), (203, 57), (208, 33), (211, 18), (212, 9)),
        "mxfp8": ((182, 72), (194, 45), (200, 26), (203, 14), (204, 7))},
}
#: the device tables measured
TABLES = ("gb200", "gb300")


def shape_class(attention: Attention) -> str:
    """Which measured shape an attention kernel takes its speed-up from."""
    if attention.windowed:
        return "window"
    return "mla192" if attention.head_dim > 128 else "gqa128"


def fp8_speedup(device: Device, attention: Attention) -> float:
    """FP8 attention's rate over BF16's for ``attention`` (its ``recipe``: ``mxfp8``, or
    one scale per tensor otherwise) on ``device``, from the measurements it names
    (:attr:`~.devices.Device.fp8_attention`).

    Raises
    ------
    ConfigError
        When the device names no measurement.
    """
    table = device.fp8_attention
    if table not in TABLES:
        raise config_error(f"device {device.name!r}", "fp8_attention",
                           "false: FP8 attention is priced from cuDNN's measurements on "
                           "GB200 and GB300 (and B200, B300) only", True)
    measured = MEASURED[(table, shape_class(attention))]
    precision = "mxfp8" if attention.recipe == "mxfp8" else "fp8"
    column = 1 if attention.backward else 0
    ratios = [fp8[column] / bf16[column]
              for fp8, bf16 in zip(measured[precision], measured["bf16"], strict=True)]
    length = min(max(attention.seq_kv, SEQUENCES[0]), SEQUENCES[-1])
    position = math.log2(length / SEQUENCES[0])
    low = min(int(position), len(SEQUENCES) - 2)
    weight = position - low
    return ratios[low] * (1 - weight) + ratios[low + 1] * weight
