"""flowsim benchmarks: prints a table of cold (fresh process, import + compile or cache load
+ first call) and warm (median of repeats) wall times and peak RSS per case.

    python scripts/bench.py             # all cases, the scaling series, the whole processes
    python scripts/bench.py maxmin      # cases whose name contains 'maxmin'

Whole processes (one point per process, start-up included, against ASTRA-sim's recorded or
locally run wall times; the 16K- and 131K-GPU training iterations) are in
``scripts/bench_process.py``; start-up alone in ``scripts/bench_cli.py``; grid points per
second of ``estimate_batch`` (several networks, and a one-point call) in
``scripts/bench_estimate.py``; the memory of repeated runs in one process in
``scripts/bench_loop_memory.py``.

Targets are checked here, not in unit tests (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_LLAMA_16K = """
spec = dict(generator="transformer", layers=126, hidden=16384, ffn=53248, heads=128,
            kv_heads=8, vocab=128256, sequence=8192, global_batch=16 * 128, micro_batch=1,
            tp=8, pp=16, dp=128, vpp=4, pipeline_layout="first_last_fewer", sp=True,
            distributed_optimizer=True, gated_mlp=True, attention="flash", dtype="bf16",
            overlap_grad_reduce=True, overlap_param_gather=True)
net = flowsim.load_network(dict(cluster=dict(device="h100_sxm_80gb", nodes=2048,
                                             gpus_per_node=8, nic_gbps=400, nics_per_node=8)))
def run():
    return flowsim.simulate(net, spec, "nccl", model=MODEL)
"""

_BUILT_ONCE = """
work = flowsim.load_workload(spec, net)
def run():
    record = flowsim.run_training(net, work, "nccl", model=MODEL).record
    return {"npus": net.npus, **vars(record.stats)}
"""

CASES: dict[str, str] = {
    "maxmin 200k flows x 20k links": """
rng = np.random.default_rng(0)
F, L = 200_000, 20_000
lengths = rng.integers(1, 6, F)
indptr = np.concatenate([[0], np.cumsum(lengths)])
# distinct links within a flow: a random start plus strictly increasing offsets
start = np.repeat(rng.integers(0, L, F), lengths)
step = rng.integers(1, L // 8, indptr[-1])
first = np.repeat(indptr[:-1], lengths)
offsets = np.cumsum(step) - np.repeat(np.cumsum(step)[indptr[:-1]] - step[indptr[:-1]], lengths)
links = ((start + offsets - step[first]) % L).astype(np.int32)
capacity = rng.uniform(1, 100, L)
def run():
    flowsim.maxmin_rates(capacity, indptr, links)
    return {'npus': 0, 'flows': F, 'steps': 0, 'events': 0, 'rate_computations': 1}
""",
    "ring all-reduce 1GiB, 4096 NPUs 16x16x16, 16 chunks, analytical": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='analytical')
""",
    "ring all-reduce 1GiB, 4096 NPUs 16x16x16, 16 chunks, flow": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='flow')
""",
    "same, flow, every group simulated (symmetry=False)": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='flow',
                                       symmetry=False)
""",
    "ring all-reduce 1GiB, 1024-NPU switch, 4 chunks, analytical": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
def run():
    return flowsim.simulate_collective(net, 'all_reduce', '1GiB', 'ring_4chunks',
                                       model='analytical')
""",
    "ring all-reduce 1GiB, 1024-NPU switch, 4 chunks, flow": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
def run():
    return flowsim.simulate_collective(net, 'all_reduce', '1GiB', 'ring_4chunks',
                                       model='flow')
""",
    "same, flow, raw engine (every step's flows simulated, no replay)": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
def run():
    return flowsim.simulate_collective(net, 'all_reduce', '1GiB', 'ring_4chunks',
                                       model='flow', replay=False)
""",
    "direct all-to-all 1GiB, 1024-NPU switch, analytical": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
sys_ = {'preferred-dataset-splits': 1, 'all-to-all-implementation': ['direct']}
def run():
    return flowsim.simulate_collective(net, 'all_to_all', '1GiB', sys_,
                                       model='analytical')
""",
    "direct all-to-all 1GiB, 1024-NPU switch, flow": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
sys_ = {'preferred-dataset-splits': 1, 'all-to-all-implementation': ['direct']}
def run():
    return flowsim.simulate_collective(net, 'all_to_all', '1GiB', sys_,
                                       model='flow')
""",
    "transformer iteration, 1024 NPUs (GPT-3 class, TP8 x DP8 x PP16, 16 micro-batches), "
    "analytical": """
net = flowsim.load_network('gpt_1024')
def run():
    return flowsim.simulate(net, 'gpt3_3d', model='analytical')
""",
    "transformer iteration, 1024 NPUs (GPT-3 class, TP8 x DP8 x PP16, 16 micro-batches), "
    "flow": """
net = flowsim.load_network('gpt_1024')
def run():
    return flowsim.simulate(net, 'gpt3_3d', model='flow')
""",
    **{f"Llama-3-405B-class iteration, 16,384 GPUs, {model}":
       _LLAMA_16K.replace("MODEL", repr(model)) for model in ("analytical", "flow")},
    # an optimizer's loop: the workload built once, run on each candidate network
    **{f"Llama-3-405B-class iteration, 16,384 GPUs, built once, {model}":
       (_LLAMA_16K + _BUILT_ONCE).replace("MODEL", repr(model)) for model in ("analytical",
                                                                               "flow")},
    # a mixture of experts at its published scale: 120 micro-batches x 61 layers and the MTP
    # depth under DualPipeV, every MoE layer's DeepEP exchanges (inter- and intra-node
    # all-to-alls) sharing the links
    "DeepSeek-V3 step, 2,048 H800s (PP 16 x EP 64, DeepEP dispatch), flow": """
net = flowsim.load_network(dict(cluster=dict(device="h800", nodes=256, gpus_per_node=8,
                                             nic_gbps=400, nics_per_node=8)))
def run():
    return flowsim.simulate(net, "deepseek_v3", "nccl", model="flow")
""",
    "estimate_batch 1M points, 2-D ring x switch all-reduce": """
net = flowsim.load_network({'topology': ['Ring', 'Switch'], 'npus_count': [8, 16],
                            'bandwidth': [100, 50], 'latency': [500, 500]})
rng = np.random.default_rng(0)
bw, size = rng.uniform(10, 400, (1_000_000, 2)), np.full(1_000_000, 1 << 26)
def run():
    flowsim.estimate_batch(net, 'all_reduce', size, bandwidth=bw)
    return {'npus': 128, 'flows': 0, 'steps': 0, 'events': 0, 'rate_computations': 0}
""",
}

#: issue targets on this 2-core machine: case -> (warm seconds, peak RSS MB or None)
TARGETS: dict[str, tuple[float, float | None]] = {
    "ring all-reduce 1GiB, 4096 NPUs 16x16x16, 16 chunks, flow": (1.4, None),
    "direct all-to-all 1GiB, 1024-NPU switch, flow": (6.7, 2048.0),
    "transformer iteration, 1024 NPUs (GPT-3 class, TP8 x DP8 x PP16, 16 micro-batches), "
    "flow": (30.0, None),
    "estimate_batch 1M points, 2-D ring x switch all-reduce": (0.2, None),   # 5 M points/s
}

#: pairs of cases (name without the model) whose warm ratio issue 17 sets a target for
RATIOS = ("Llama-3-405B-class iteration, 16,384 GPUs",
          "Llama-3-405B-class iteration, 16,384 GPUs, built once")

_CHILD = """
import json, resource, time, statistics, sys
t0 = time.perf_counter()
import numpy as np
import flowsim
{setup}
t1 = time.perf_counter()
result = run()
if isinstance(result, dict):
    info = result
else:  # a Dataset: its size and the work the simulation did
    from flowsim.results import from_attrs
    info = from_attrs(result.attrs).as_dict()
    info['npus'] = result.sizes['npu']
cold = time.perf_counter() - t1
repeats = {repeats}
warm = []
for _ in range(repeats):
    t = time.perf_counter()
    run()
    warm.append(time.perf_counter() - t)
print(json.dumps({{"import_s": t1 - t0, "cold_s": cold, "warm_s": statistics.median(warm),
                  "info": info,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def _verdict(name: str, warm: float, rss: float) -> str:
    limit = TARGETS.get(name)
    if limit is None:
        return ""
    seconds, memory = limit
    ok = warm < seconds and (memory is None or rss < memory)
    return f"  target < {seconds:g} s" + (f", {memory:g} MB" if memory else "") + \
        (": met" if ok else ": MISSED")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("pattern", nargs="?", default="",
                        help="run only the cases whose name contains this text (default: all "
                             "cases, then the scaling series)")
    pattern = parser.parse_args(argv).pattern
    repeats = 5
    warm: dict[str, float] = {}
    print(f"{'case':<66} {'NPUs':>6} {'flows':>9} {'steps':>7} {'reused':>7} {'events':>7} "
          f"{'rates':>6} {'import':>6} {'cold s':>7} {'warm s':>7} {'RSS MB':>6}")
    for name, setup in CASES.items():
        if pattern not in name:
            continue
        code = _CHILD.format(setup=setup, repeats=repeats)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name:<66} FAILED: {done.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        i = r["info"]
        warm[name] = r["warm_s"]
        print(f"{name:<66} {i['npus']:>6} {i['flows']:>9} {i['steps']:>7} "
              f"{i.get('reused_steps', 0):>7} {i['events']:>7} {i['rate_computations']:>6} "
              f"{r['import_s']:6.2f} {r['cold_s']:7.3f} {r['warm_s']:7.3f} {r['rss_mb']:6.0f}"
              f"{_verdict(name, r['warm_s'], r['rss_mb'])}")
    for base in RATIOS:   # issue 17: the analytical model >= 10x faster than the flow model
        fast, slow = warm.get(f"{base}, analytical"), warm.get(f"{base}, flow")
        if fast and slow:
            print(f"{base}: flow / analytical {slow / fast:.1f}x (target >= 10x: "
                  f"{'met' if slow >= 10 * fast else 'MISSED'})")
    if not pattern:   # the scaling series (and its plot), the whole processes, a run loop
        for script in ("bench_scaling.py", "bench_process.py", "bench_loop_memory.py"):
            print()
            subprocess.run([sys.executable, str(Path(__file__).with_name(script))],
                           check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
