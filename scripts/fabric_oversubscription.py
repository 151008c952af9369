"""All-reduce and all-to-all time against leaf-spine oversubscription on a DGX-like pod
(the README's "Fabrics" figure).

    python scripts/fabric_oversubscription.py [--hosts 128] [-o fabric_oversubscription.png]

Both collectives are hierarchical over the logical dims [8 GPUs of a host, hosts]; the
all-to-all's host phase crosses the spines, the all-reduce's host phase (ring, on 1/8 of the
data after the reduce-scatter inside the host) mostly does too. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import xarray as xr

import flowsim
from flowsim._atomic import refuse_missing_folder, save_figure

RATIOS = [1, 2, 4, 8]
SYSTEM = {"preferred-dataset-splits": 4, "endpoint-delay": 10, "local-mem-bw": 1600,
          "collective-optimization": "localBWAware",
          "all-reduce-implementation": ["ring", "ring"],
          "all-to-all-implementation": ["direct", "direct"]}


def pod(hosts: int, ratio: int) -> dict:
    return {"fabric": {"generator": "leaf_spine", "hosts": hosts, "npus_per_host": 8,
                       "scale_up": {"bandwidth": 450, "latency": 150},
                       "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 4,
                       "oversubscription": ratio, "spine_latency": 500}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("-o", "--output", default="fabric_oversubscription.png")
    args = parser.parse_args(argv)
    refuse_missing_folder(parser, args.output, "--output")
    times = np.zeros((2, 2, len(RATIOS)))
    collectives = ["all_reduce", "all_to_all"]
    models = ["analytical", "flow"]
    for k, ratio in enumerate(RATIOS):
        for i, collective in enumerate(collectives):
            for j, model in enumerate(models):
                start = time.perf_counter()
                times[i, j, k] = flowsim.estimate(pod(args.hosts, ratio), collective,
                                                  args.size, SYSTEM, model=model)
                print(f"{ratio}:1 {collective:10s} {model:10s} {times[i, j, k] / 1e6:9.3f} ms"
                      f"  ({time.perf_counter() - start:.1f} s)")
    result = xr.DataArray(times, dims=("collective", "model", "oversubscription"),
                          coords={"collective": collectives, "model": models,
                                  "oversubscription": RATIOS}, name="time_ns")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for collective, marker in zip(collectives, "os"):
        for model, style in zip(models, ["--", "-"]):
            line = result.sel(collective=collective, model=model) / 1e6
            ax.plot(RATIOS, line, style, marker=marker,
                    label=f"{collective.replace('_', '-')}, {model}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(RATIOS, [f"{r}:1" for r in RATIOS])
    ax.set_xlabel("leaf-spine oversubscription")
    ax.set_ylabel(f"time of a {args.size} collective (ms)")
    ax.set_title(f"{args.hosts * 8} GPUs: {args.hosts} hosts x 8 (NVSwitch), 50 GB/s NICs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, args.output, option="--output")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
