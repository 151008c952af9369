"""Whole-process benchmarks: one point per process, as a shell loop over configurations runs
flowsim (and ASTRA-sim), so start-up counts. Medians of interleaved rounds, peak RSS of each
process, and ``python -c pass`` in the same run.

    python scripts/bench_process.py               # every case
    python scripts/bench_process.py switch        # cases whose name contains 'switch'
    python scripts/bench_process.py --rounds 5

Where ASTRA-sim is built (``ASTRA_SIM_BIN``: the folder holding
``AstraSim_Analytical_Congestion_Unaware``), its analytical binary runs the collective cases
in the same rounds (Chakra traces written with :func:`flowsim.workload.chakra_format.write_et`)
and the ratios are printed; otherwise the ratios are against ASTRA-sim's wall times recorded
on this kind of machine (issue 17's table: ASTRA-sim 2.x 518bd51, Release build, whole
process, medians of 3), and the table says so. flowsim's modules are byte-compiled first,
as a wheel installs them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SWITCH_1024 = {"topology": ["Switch"], "npus_count": [1024], "bandwidth": [50.0],
               "latency": [500.0]}
CUBE_4096 = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [16, 16, 16],
             "bandwidth": [200.0, 100.0, 50.0], "latency": [100.0, 200.0, 500.0]}
SMALL_3D = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [4, 8, 4],
            "bandwidth": [200.0, 100.0, 50.0], "latency": [100.0, 200.0, 500.0]}
RING_8 = {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50.0], "latency": [500.0]}


#: 8,192 GPUs as the 1,024-GPU rail pod (topologies/dgx_pod_1024_rail.yml): 8 rails, 32
#: servers per rail group, 16 spines at 1:1
RAIL_8192 = {"fabric": {"generator": "leaf_spine", "hosts": 1024, "npus_per_host": 8,
                        "scale_up": {"bandwidth": 450, "latency": 150},
                        "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 32,
                        "rail_optimized": True, "oversubscription": 1, "spines": 16,
                        "spine_latency": 500, "routing": "ecmp"}}
RAIL_8192_HASH = {"fabric": {**RAIL_8192["fabric"], "routing": "hash"}}


def system(ndims: int, splits: int = 4) -> dict:
    """ASTRA-sim's system json of the validation runs: 4 chunks, one in flight per dimension,
    ring all-reduce, direct all-to-all."""
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10,
            "active-chunks-per-dimension": 1, "preferred-dataset-splits": splits,
            "all-reduce-implementation": ["ring"] * ndims,
            "all-gather-implementation": ["ring"] * ndims,
            "reduce-scatter-implementation": ["ring"] * ndims,
            "all-to-all-implementation": ["direct"] * ndims,
            "collective-optimization": "localBWAware", "local-mem-bw": 1600}


@dataclass
class Collective:
    """One collective, whole process: ``flowsim collective --json`` (and ASTRA-sim)."""

    network: dict
    collective: str
    size: int
    #: ASTRA-sim's unaware backend, whole process, seconds (issue 17's measurement)
    astra_recorded_s: float
    #: flowsim's target, whole process, seconds (None: none set)
    target_s: float | None = None
    models: tuple[str, ...] = ("analytical", "flow")


@dataclass
class FabricCollective:
    """One collective on a routed fabric, whole process, one chunk (all of a direct
    all-to-all's messages in one step)."""

    network: dict
    collective: str
    size: int
    targets_s: dict[str, float] = field(default_factory=dict)
    rss_gb: float | None = None
    models: tuple[str, ...] = ("analytical", "flow")


@dataclass
class Training:
    """One Llama-3-405B-class iteration (TP 8 x CP ``cp`` x PP 16 x DP ``dp``, interleaved
    1F1B of ``vpp`` virtual stages, 16 micro-batches per DP group) on a multi-dimensional
    cluster of ``dp * cp * 128`` GPUs."""

    dp: int
    targets_s: dict[str, float] = field(default_factory=dict)
    rss_gb: float | None = None
    models: tuple[str, ...] = ("analytical", "flow")
    #: a cluster preset of ``topologies/clusters/`` scaled to ``dp * cp * 16`` nodes
    #: (default: the multi-dimensional DGX H100-style cluster block)
    preset: str = ""
    cp: int = 1
    vpp: int = 4


@dataclass
class Published:
    """One run of ``validation/published/`` predicted as ``scripts/validate_published.py``
    does (the run's name, a substring of one row's)."""

    run: str
    models: tuple[str, ...] = ("analytical",)


CASES: dict[str, Collective | FabricCollective | Training | Published] = {
    "ring 8, all-reduce 64 MiB": Collective(RING_8, "all_reduce", 64 << 20, 0.01, 0.5,
                                            ("analytical",)),
    "switch 1024, ring all-reduce 1 GiB": Collective(SWITCH_1024, "all_reduce", 1 << 30, 18.1,
                                                     18.1 / 50),
    "switch 1024, direct all-to-all 1 GiB": Collective(SWITCH_1024, "all_to_all", 1 << 30,
                                                       85.3, 85.3 / 50),
    "16x16x16, ring all-reduce 1 GiB": Collective(CUBE_4096, "all_reduce", 1 << 30, 12.7,
                                                  12.7 / 50),
    "4x8x4, direct all-to-all 1 GiB": Collective(SMALL_3D, "all_to_all", 1 << 30, 0.07),
    "1,024-GPU 1:1 pod, ECMP all-to-all 1 GiB": FabricCollective(
        {"fabric": {"generator": "leaf_spine", "hosts": 128, "npus_per_host": 8,
                    "scale_up": {"bandwidth": 450, "latency": 150},
                    "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 4,
                    "oversubscription": 1, "spines": 16, "spine_latency": 500,
                    "routing": "ecmp"}}, "all_to_all", 1 << 30, {"flow": 10.0}, 2.0),
    "8,192-GPU rail fabric, ring all-reduce 256 MiB": FabricCollective(
        RAIL_8192, "all_reduce", 256 << 20, {"flow": 60.0}),
    "8,192-GPU rail fabric, ECMP all-to-all 256 MiB": FabricCollective(
        RAIL_8192, "all_to_all", 256 << 20, {"flow": 60.0}),
    "8,192-GPU rail fabric, hashed all-to-all 256 MiB": FabricCollective(
        RAIL_8192_HASH, "all_to_all", 256 << 20, {"flow": 60.0}, models=("flow",)),
    "Llama-3-405B iteration, 16,384 GPUs": Training(128, {"flow": 5.0}, 2.0),
    "Llama-3-405B iteration, 131,072 GPUs": Training(1024, {"flow": 60.0}, 8.0),
    # context parallelism's ring exchanges cross nodes beside the pipeline's and data
    # parallelism's traffic: congested phases, timed on the run's quotient
    "Llama-3-405B iteration, CP 2, 16,384 GPUs": Training(64, {"flow": 10.0}, 2.0,
                                                         models=("flow",), cp=2, vpp=8),
    "Llama-3-405B iteration, CP 2, 131,072 GPUs": Training(512, {"flow": 60.0}, 8.0,
                                                          models=("flow",), cp=2, vpp=8),
    # Llama 3's published cluster as a routed three-tier RoCE Clos (routing included)
    "Llama-3-405B iteration, 24,576 GPUs, RoCE Clos fabric": Training(
        192, models=("flow",), preset="roce_clos_h100_fabric"),
    # a long pipeline of many micro-batches: 0.67 M ops to build, check and run
    "Narayanan et al. 529B, 2,240 A100s (PP 35)": Published("narayanan21_t2_529b_2240gpu"),
}

_PUBLISHED = """
import sys
import warnings
sys.path.insert(0, {scripts!r})
import validate_published as vp
warnings.simplefilter("ignore")
(row,) = vp.rows({run!r})
print(vp.predict(row, {model!r}))
"""

_TRAINING = """
import warnings
import flowsim
warnings.simplefilter("ignore")
dp = {dp}
spec = dict(generator="transformer", layers=126, hidden=16384, ffn=53248, heads=128,
            kv_heads=8, vocab=128256, sequence=8192, global_batch=16 * dp, micro_batch=1,
            tp=8, cp={cp}, pp=16, dp=dp, vpp={vpp}, pipeline_layout="first_last_fewer", sp=True,
            distributed_optimizer=True, gated_mlp=True, attention="flash", dtype="bf16",
            overlap_grad_reduce=True, overlap_param_gather=True)
cluster = dict(device="h100_sxm_80gb", nodes=16 * dp * {cp}, gpus_per_node=8, nic_gbps=400,
               nics_per_node=8)
if "{preset}":
    import yaml
    from pathlib import Path
    cluster = yaml.safe_load(Path(r"{clusters}", "{preset}.yml").read_text())["cluster"]
    cluster["nodes"] = 16 * dp * {cp}
net = flowsim.load_network(dict(cluster=cluster))
print(float(flowsim.simulate(net, spec, "nccl", model="{model}").time_ns))
"""


def timed(argv: list[str], cwd: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB) of one whole process (its output discarded)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv[:3]}... failed: {proc.stderr.read().decode()[-300:]}")
    return wall, usage.ru_maxrss / 1e6


def write_configs(case: Collective | FabricCollective, folder: Path) -> dict[str, Path]:
    """The case's network and system files, and (for ASTRA-sim) a remote-memory file and a
    Chakra trace per rank: one collective node, every dimension involved."""
    import yaml

    from flowsim.workload.chakra_format import write_et

    files = {"network": folder / "network.yml", "system": folder / "system.json",
             "memory": folder / "memory.json", "traces": folder / "trace"}
    files["network"].write_text(yaml.safe_dump(case.network))
    if isinstance(case, FabricCollective):   # the leaf-spine generator's [GPUs, servers]
        files["system"].write_text(json.dumps(system(2, splits=1)))
        return files
    files["system"].write_text(json.dumps(system(len(case.network["npus_count"]))))
    files["memory"].write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    npus = 1
    for n in case.network["npus_count"]:
        npus *= n
    if os.environ.get("ASTRA_SIM_BIN"):
        node = {"id": 0, "name": case.collective, "type": "COMM_COLL_NODE",
                "attr": {"is_cpu_op": False, "comm_type": case.collective.upper(),
                         "comm_size": case.size}}
        for rank in range(npus):
            write_et(f"{files['traces']}.{rank}.et", [node])
    return files


def commands(case: Collective | FabricCollective | Training | Published, folder: Path,
             flowsim: str) -> dict[str, list[str]]:
    """The timed commands of a case: flowsim under each model, ASTRA-sim where built."""
    if isinstance(case, Training):
        clusters = Path(__file__).resolve().parent.parent / "topologies" / "clusters"
        return {f"flowsim {m}": [sys.executable, "-c", _TRAINING.format(
            dp=case.dp, cp=case.cp, vpp=case.vpp, model=m, preset=case.preset,
            clusters=clusters)] for m in case.models}
    if isinstance(case, Published):
        scripts = str(Path(__file__).resolve().parent)
        return {f"flowsim {m}": [sys.executable, "-c", _PUBLISHED.format(
            scripts=scripts, run=case.run, model=m)] for m in case.models}
    files = write_configs(case, folder)
    out = {f"flowsim {m}": [flowsim, "collective", "--json", "--network", str(files["network"]),
                            "--system", str(files["system"]), "--collective", case.collective,
                            "--size", str(case.size), "--model", m] for m in case.models}
    binary = Path(os.environ.get("ASTRA_SIM_BIN", "")) / "AstraSim_Analytical_Congestion_Unaware"
    if isinstance(case, Collective) and os.environ.get("ASTRA_SIM_BIN") and binary.is_file():
        out["ASTRA-sim unaware"] = [
            str(binary), f"--workload-configuration={files['traces']}",
            f"--system-configuration={files['system']}",
            f"--remote-memory-configuration={files['memory']}",
            f"--network-configuration={files['network']}"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("pattern", nargs="?", default="",
                        help="run only the cases whose name contains this text")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (default 3)")
    args = parser.parse_args(argv)
    beside = Path(sys.executable).with_name("flowsim")
    flowsim = str(beside) if beside.is_file() else shutil.which("flowsim")
    if flowsim is None:
        parser.error("the flowsim command is not installed (pip install -e .)")
    neutral = tempfile.gettempdir()
    # as an installed wheel has them: with PYTHONDONTWRITEBYTECODE set (some sandboxes, CI) an
    # editable install would otherwise compile every module of flowsim in every process
    import flowsim as package

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(package.__file__).parent)],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"{'case':<48} {'command':<20} {'median s':>9} {'RSS GB':>7} {'vs pass':>8}  "
          "ASTRA-sim unaware / target")
    for name, case in CASES.items():
        if args.pattern.lower() not in name.lower():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            runs = {"python -c pass": [sys.executable, "-c", "pass"],
                    **commands(case, Path(tmp), flowsim)}
            walls: dict[str, list[float]] = {k: [] for k in runs}
            rss: dict[str, float] = dict.fromkeys(runs, 0.0)
            for _ in range(args.rounds):   # interleaved: machine load hits every command alike
                for label, command in runs.items():
                    wall, peak = timed(command, neutral)
                    walls[label].append(wall)
                    rss[label] = max(rss[label], peak)
        base = statistics.median(walls["python -c pass"])
        astra = statistics.median(walls["ASTRA-sim unaware"]) if "ASTRA-sim unaware" in walls \
            else getattr(case, "astra_recorded_s", None)
        source = "run here" if "ASTRA-sim unaware" in walls else "recorded"
        for label in runs:
            if label in ("python -c pass", "ASTRA-sim unaware"):
                continue
            median = statistics.median(walls[label])
            model = label.split()[-1]
            notes = []
            if astra is not None:
                ratio = astra / median
                speed = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.0f}x slower"
                notes.append(f"{speed} than ASTRA-sim ({astra:g} s, {source})")
            target = case.target_s if isinstance(case, Collective) and model == "analytical" \
                else getattr(case, "targets_s", {}).get(model)
            if target is not None:
                limit = getattr(case, "rss_gb", None)
                met = median < target and (limit is None or rss[label] < limit)
                notes.append(f"target < {target:.2f} s" + (f", {limit:g} GB" if limit else "")
                             + (": met" if met else ": MISSED"))
            print(f"{name:<48} {label:<20} {median:9.2f} {rss[label]:7.2f} "
                  f"{median / base:7.1f}x  {'; '.join(notes)}")
        if isinstance(case, Training) and {"flowsim analytical", "flowsim flow"} <= set(walls):
            ratio = statistics.median(walls["flowsim flow"]) / statistics.median(
                walls["flowsim analytical"])
            print(f"{name:<48} {'flow / analytical':<20} {ratio:8.1f}x  "
                  f"target >= 10x: {'met' if ratio >= 10 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
