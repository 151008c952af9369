"""flowsim benchmarks: prints a table of cold (fresh process, import + compile or cache load
+ first call) and warm (median of repeats) wall times and peak RSS per case.

    python scripts/bench.py             # all cases
    python scripts/bench.py maxmin      # cases whose name contains 'maxmin'

Targets are checked here, not in unit tests (timings depend on the machine).
"""

from __future__ import annotations

import json
import subprocess
import sys

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
    return flowsim.maxmin_rates(capacity, indptr, links).size
""",
    "ring all-reduce 1GiB, 4096 NPUs 16x16x16, 16 chunks, analytical": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='analytical').attrs['stats']
""",
    "ring all-reduce 1GiB, 4096 NPUs 16x16x16, 16 chunks, flow": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='flow').attrs['stats']
""",
    "same, flow, every group simulated (symmetry=False)": """
def run():
    return flowsim.simulate_collective('r16_fc16_sw16', 'all_reduce', '1GiB',
                                       'ring_16chunks_3d', model='flow',
                                       symmetry=False).attrs['stats']
""",
    "ring all-reduce 1GiB, 1024-NPU switch, 4 chunks, analytical": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
def run():
    return flowsim.simulate_collective(net, 'all_reduce', '1GiB', 'ring_4chunks',
                                       model='analytical').attrs['stats']
""",
    "ring all-reduce 1GiB, 1024-NPU switch, 4 chunks, flow": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
def run():
    return flowsim.simulate_collective(net, 'all_reduce', '1GiB', 'ring_4chunks',
                                       model='flow').attrs['stats']
""",
    "direct all-to-all 1GiB, 1024-NPU switch, analytical": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
sys_ = {'preferred-dataset-splits': 1, 'all-to-all-implementation': ['direct']}
def run():
    return flowsim.simulate_collective(net, 'all_to_all', '1GiB', sys_,
                                       model='analytical').attrs['stats']
""",
    "direct all-to-all 1GiB, 1024-NPU switch, flow": """
net = {'topology': ['Switch'], 'npus_count': [1024], 'bandwidth': [50], 'latency': [500]}
sys_ = {'preferred-dataset-splits': 1, 'all-to-all-implementation': ['direct']}
def run():
    return flowsim.simulate_collective(net, 'all_to_all', '1GiB', sys_,
                                       model='flow').attrs['stats']
""",
    "transformer iteration, 1024 NPUs (GPT-3 class, TP8 x DP8 x PP16, 16 micro-batches), "
    "analytical": """
net = flowsim.load_network('gpt_1024')
def run():
    return flowsim.simulate(net, 'gpt3_3d', model='analytical').attrs['stats']
""",
    "transformer iteration, 1024 NPUs (GPT-3 class, TP8 x DP8 x PP16, 16 micro-batches), "
    "flow": """
net = flowsim.load_network('gpt_1024')
def run():
    return flowsim.simulate(net, 'gpt3_3d', model='flow').attrs['stats']
""",
}

_CHILD = """
import json, resource, time, statistics, sys
t0 = time.perf_counter()
import numpy as np
import flowsim
{setup}
t1 = time.perf_counter()
info = run()
cold = time.perf_counter() - t1
repeats = {repeats}
warm = []
for _ in range(repeats):
    t = time.perf_counter()
    run()
    warm.append(time.perf_counter() - t)
print(json.dumps({{"import_s": t1 - t0, "cold_s": cold, "warm_s": statistics.median(warm),
                  "info": str(info),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def main(argv: list[str]) -> int:
    pattern = argv[0] if argv else ""
    repeats = 5
    print(f"{'case':<66} {'import':>7} {'cold':>8} {'warm':>8} {'RSS MB':>7}  info")
    for name, setup in CASES.items():
        if pattern not in name:
            continue
        code = _CHILD.format(setup=setup, repeats=repeats)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name:<66} FAILED: {done.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:<66} {r['import_s']:7.2f} {r['cold_s']:8.3f} {r['warm_s']:8.3f} "
              f"{r['rss_mb']:7.0f}  {r['info']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
