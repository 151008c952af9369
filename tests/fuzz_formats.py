"""Every config format a user hands flowsim, for the fuzz suite (tests/test_fuzz_configs.py):
a valid base (mostly the bundled configs), the keys flowsim validates and the kind of each,
bad values per kind, how to run a file through the CLI and through the Python API, and the
mutations (a bad value at a key, or a broken file: deep nesting, a duplicate key, bytes that
are not UTF-8, an alias bomb)."""

from __future__ import annotations

import copy
import io
import json
import math
import re
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

import flowsim
from flowsim._io import MAX_DEPTH
from flowsim.cli import main
from flowsim.errors import FlowsimError
from flowsim.resources import bundled_dir
from flowsim.sweep import load_spec
from flowsim.workload import Op, Program, Workload
from flowsim.workload.chakra import save_chakra

#: Longest a bad input may take to be refused (CLI or API), in seconds.
LIMIT_S = 5.0
NAN, INF = math.nan, math.inf
HUGE = 10**400
#: Bad values by the kind of value a key holds (every one must be refused for that kind).
BAD: dict[str, list[Any]] = {
    "positive": [0, -1, NAN, INF, -INF, 5e-324, 1e308, HUGE, "fast", [1], {"a": 1}, None,
                 True],
    "nonneg": [-1, NAN, INF, 1e308, HUGE, "x", [1], {"a": 1}, None, True],
    "count2": [1, 0, -5, 2.5, 10**9, HUGE, "8", [8], None, True, NAN],
    "count1": [0, -5, 2.5, HUGE, 8e200, "8", [8], {"a": 1}, None, True, NAN, INF],
    "choice": [["x"], {"a": 1}, 5, "nonsense", None, True],
    "bool": ["no", "yes", 2, [True], {"a": 1}, None],
    "size": [-5, 1.5, "1.5B", HUGE, "3 parsecs", "1e400", [1], None, True, NAN, INF],
    "duration": [-1, NAN, INF, 1e308, HUGE, "soon", "-2us", [1], {}, None, True],
    "ids": ["zero", [-1], [0.5], [HUGE], {"a": 1}, [True]],
    "unhashable": [[1], {"a": 1}, [[1]]],
}
#: Bad tokens of the line formats (ASTRA-sim text workloads, 1.0 system files).
BAD_TOKENS: dict[str, list[str]] = {
    "compute": ["-1", "x", "nan", "inf", "1e400", "9" * 5000],
    "bytes": ["1.5", "-8", "1e3", "9" * 400, "x", "9" * 5000],
    "comm": ["ALLREDUSE", "ALLREDUCEALLTOALL", "allreduce"],
    "splits": ["1e9", "0", "-1", "2.5", "x", "9" * 400, "nan"],
    "delay": ["-1", "2.5", "x", "9" * 400, "nan", "inf", "1e13"],
    "policy": ["RANDOM", "lifo", "x"],
    "algorithms": ["ring_x", "direct" + "9" * 5000, "_", "Ring"],
}
BOMB = ("bomb_a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"bomb_{chr(98 + i)}: &{chr(98 + i)} ["
                  + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(9)))
STRUCTURAL = ("deep", "duplicate", "encoding", "bomb")


@dataclass(frozen=True)
class Format:
    """One input format: a valid base, its validated keys, how the CLI and the API read it."""

    name: str
    suffix: str
    base: Callable[[], Any]                       # a mapping, or text for line formats
    keys: tuple[tuple[tuple, str], ...]           # (path of keys / indices, kind of value)
    cli: Callable[[Path, Path], list[str]]        # (file, work folder) -> argv
    api: Callable[[Path, Path], Any]

    @property
    def text_format(self) -> bool:
        return self.suffix == ".txt"


def bundled(kind: str, name: str) -> Any:
    path = bundled_dir(kind) / name
    if path.suffix == ".txt":
        return path.read_text()
    return yaml.safe_load(path.read_text())


# ------------------------------------------------------------------------------ writing
def dump(data: Any, suffix: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if suffix == ".json":
        return json.dumps(data).encode()
    return yaml.safe_dump(data, sort_keys=False).encode()


def with_value(data: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(data)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def with_token(text: str, path: tuple, token: str) -> str:
    """Line formats: ``path`` is (line index, token index) or (key,) for 1.0 system files."""
    lines = text.splitlines()
    if isinstance(path[0], str):
        lines = [f"{path[0]}: {token}" if line.split(":")[0] == path[0] else line
                 for line in lines]
    else:
        tokens = lines[path[0]].split()
        tokens[path[1]] = token
        lines[path[0]] = " ".join(tokens)
    return "\n".join(lines) + "\n"


def broken(fmt: Format, how: str, position: int) -> bytes:
    """The base file broken in one of the :data:`STRUCTURAL` ways."""
    base = fmt.base()
    raw = dump(base, fmt.suffix)
    if how == "encoding" or fmt.text_format:
        at = position % (len(raw) + 1)
        return raw[:at] + b"\xff\xfe" + raw[at:]
    if how == "deep":
        deep: list = []
        for _ in range(MAX_DEPTH + 10):
            deep = [deep]
        return dump(with_value(base, fmt.keys[position % len(fmt.keys)][0][:1], deep),
                    fmt.suffix)
    first = next(iter(base))
    if how == "duplicate":
        if fmt.suffix == ".json":
            return b'{"%s": 1, ' % first.encode() + raw.lstrip()[1:]
        return raw + f"{first}: 1\n".encode()
    return raw + BOMB.encode()   # how == "bomb" (a JSON file: not JSON either)


# ------------------------------------------------------------------------------ checking
def run_cli(argv: list[str]) -> tuple[int, str]:
    """``flowsim <argv>`` in this process; its exit code and stderr."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


def assert_refused(fmt: Format, data: bytes, folder: Path) -> None:
    """The file is refused by the CLI (exit 2, one line, quickly) and by the API (a
    FlowsimError, quickly)."""
    path = folder / f"{fmt.name}{fmt.suffix}"
    path.write_bytes(data)
    start = time.perf_counter()
    code, err = run_cli(fmt.cli(path, folder))
    took = time.perf_counter() - start
    lines = err.splitlines()
    assert code == 2, (code, err[:500])
    assert len(lines) == 1 and lines[0].startswith("flowsim: error: "), err[:500]
    assert "Traceback" not in err and took < LIMIT_S, took
    start = time.perf_counter()
    try:
        fmt.api(path, folder)
    except FlowsimError:
        pass
    else:
        raise AssertionError(f"{fmt.name}: the API accepted {data[:200]!r}")
    assert time.perf_counter() - start < LIMIT_S


# ------------------------------------------------------------------------------ fixtures
def make_folder(folder: Path) -> Path:
    """Files the formats need beside the fuzzed one: small networks, a memory workload and
    two-rank Chakra traces on communicator 1."""
    ring = {"topology": ["Ring"], "npus_count": [2], "bandwidth": [50], "latency": [500]}
    (folder / "ring2.yml").write_text(yaml.safe_dump(ring))
    cube = {"topology": ["Ring"] * 3, "npus_count": [2, 2, 2], "bandwidth": [50] * 3,
            "latency": [500] * 3}
    (folder / "cube.yml").write_text(yaml.safe_dump(cube))
    (folder / "memwork.yml").write_text(yaml.safe_dump(
        {"ops": [{"id": 0, "kind": "memory", "size": 1024, "remote": True}]}))
    programs = [Program([Op(0, "collective", collective="all_reduce", size=1024,
                            group=(0, 1))], np.array([r]), f"rank{r}") for r in range(2)]
    save_chakra(Workload(programs), folder / "traces" / "t", 2)
    (folder / "traces" / "t.comm_group.json").unlink()
    return folder


def _collective(flag: str) -> Callable[[Path, Path], list[str]]:
    def argv(path: Path, folder: Path) -> list[str]:
        network = ["--network", "r4_fc8_sw4"] if flag == "--system" else []
        return ["collective", *network, flag, str(path), "--size", "1KiB"]
    return argv


def _run(network: str, *extra: str) -> Callable[[Path, Path], list[str]]:
    def argv(path: Path, folder: Path) -> list[str]:
        net = str(folder / network) if network.endswith(".yml") else network
        if extra:   # the fuzzed file is an option's value; the workload is fixed
            workload = str(folder / ("traces/t" if extra[0] == "--comm-group"
                                     else "memwork.yml"))
            return ["run", "--network", net, "--workload", workload, extra[0], str(path)]
        return ["run", "--network", net, "--workload", str(path)]
    return argv


BAD.update({
    "ratio": [0, -1, NAN, INF, 5e-324, 1e308, HUGE, "fast", {"a": 1}, None, True],
    "hosts": BAD["count1"] + [300000],
    "count_big": BAD["count1"] + [10**8],
    "choice_not_none": [["x"], {"a": 1}, 5, "nonsense", True],
    "dims": [[3], "4", [0.5], [HUGE], 5, {"a": 1}, [0]],
    "node": ["nowhere", 99, [0], None, True, 1.5],
    "switches": [[1], [""], [["s"]], "s0", {"a": 1}],
    "ranks": [[0, 5], [0, 0], "x", [0.5, 1], [True, 1], [], None, {"a": 1}, [HUGE, 1]],
    "list": ["x", [], {"a": 1}, 5, None, [[1]]],
    "id": [-1, 1.5, "0", [0], None, True, HUGE, NAN, 2],
    "mapping": [312, "fast", [1], True, None],
    "scheme": ["ring", [1], None, 5],
    "positive_not_none": [0, -1, NAN, INF, 5e-324, 1e308, HUGE, "fast", [1], {"a": 1}, True],
    "axes": [5, "x", [1], {"size": 5}, {"size": []}, {"network.nonsense": [1]},
             {"network.bandwidth[7]": [1]}, {"bogus": [1]}],
    "zip": [{"time_ns": {"size": ["1MiB"]}}, {"!!!": {"size": ["1MiB"]}},
            {"g": {"size": ["1MiB"], "model": ["flow", "analytical"]}}, 5, {"g": 5}],
    "network_ref": [5, [1], True, "no_such_network", 2.5],
})
BAD_TOKENS.update({"parallelism": ["PIPELINE", "data", "HYBRID"],
                   "layers": ["x", "-1", "53", "0", "9" * 5000]})

ASTRA1_NETWORK = {"topology-name": "Hierarchical", "topologies-per-dim": ["Ring"],
                  "dimension-type": ["N"], "dimensions-count": 1, "units-count": [8],
                  "links-count": [2], "link-latency": [500], "link-bandwidth": [25],
                  "nic-latency": [0], "router-latency": [0], "hbm-latency": [500],
                  "hbm-bandwidth": [370], "hbm-scale": [0]}
ASTRA1_SYSTEM = "\n".join([
    "scheduling-policy: LIFO", "endpoint-delay: 10", "active-chunks-per-dimension: 1",
    "preferred-dataset-splits: 4", "all-reduce-implementation: ring_ring_ring",
    "all-gather-implementation: ring_ring_ring", "reduce-scatter-implementation: ring_ring_ring",
    "all-to-all-implementation: ring_ring_ring", "collective-optimization: localBWAware"]) + "\n"
GRAPH = {"name": "g", "layers": ["L0"], "ops": [
    {"id": 0, "kind": "compute", "duration": 100, "layer": "L0", "pass": "fwd"},
    {"id": 1, "kind": "collective", "collective": "all-reduce", "size": "1MiB", "deps": [0],
     "dims": [0]},
    {"id": 2, "kind": "memory", "size": 1024, "remote": False}]}
EXPLICIT_FABRIC = {"fabric": {"npus": 4, "switches": ["s0"], "routing": "ecmp", "links": [
    ["npu0", "s0", 100, 500], ["npu1", "s0", 100, 500], ["npu2", "s0", 100, 500],
    {"src": "npu3", "dst": "s0", "bandwidth": 100, "latency": 500, "duplex": True}]}}
MEMORY = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 1000, "remote-mem-bw": 10,
          "num-npus-per-node": 1}


def _infragraph() -> dict:
    return {"infragraph": json.loads((bundled_dir("network")
                                      / "infragraph_2hosts.infragraph.json").read_text()),
            "logical_dims": [8, 2], "routing": "ecmp"}


def _sweep() -> dict:
    root = Path(__file__).resolve().parent.parent
    return yaml.safe_load((root / "scripts" / "sweeps" / "bandwidth_split.yml").read_text())


def _network(path: Path, folder: Path) -> Any:
    return flowsim.load_network(path)


def _simulate(network: str, **kwargs: str) -> Callable[[Path, Path], Any]:
    def api(path: Path, folder: Path) -> Any:
        net = folder / network if network.endswith(".yml") else network
        if kwargs:
            option, workload = next(iter(kwargs.items()))
            return flowsim.simulate(net, folder / workload, **{option: path})
        return flowsim.simulate(net, path)
    return api


FORMATS = [
    Format("network", ".yml", lambda: bundled("network", "r4_fc8_sw4.yml"), (
        (("topology", 0), "choice"), (("topology",), "unhashable"),
        (("npus_count", 1), "count2"), (("bandwidth", 2), "positive"),
        (("latency", 0), "nonneg"), (("in_network_reduction",), "bool")),
        _collective("--network"), _network),
    Format("astra1_network", ".json", lambda: dict(ASTRA1_NETWORK), (
        (("units-count", 0), "count2"), (("link-latency", 0), "nonneg"),
        (("link-bandwidth", 0), "positive"), (("topologies-per-dim", 0), "choice"),
        (("dimension-type", 0), "choice"), (("hbm-bandwidth", 0), "positive"),
        (("dimensions-count",), "count1")),
        _collective("--network"), _network),
    Format("system", ".json", lambda: bundled("system", "ring_4chunks_3d.json"), (
        (("preferred-dataset-splits",), "count1"), (("active-chunks-per-dimension",), "count1"),
        (("endpoint-delay",), "nonneg"), (("local-mem-bw",), "positive"),
        (("scheduling-policy",), "choice"), (("collective-optimization",), "choice"),
        (("all-reduce-implementation", 1), "choice"), (("model-shared-bus",), "bool"),
        (("boost-mode",), "unhashable")),
        _collective("--system"), lambda path, folder: flowsim.load_system(path)),
    Format("astra1_system", ".txt", lambda: ASTRA1_SYSTEM, (
        (("preferred-dataset-splits",), "splits"), (("endpoint-delay",), "delay"),
        (("scheduling-policy",), "policy"), (("all-reduce-implementation",), "algorithms")),
        _collective("--system"), lambda path, folder: flowsim.load_system(path)),
    Format("text_workload", ".txt", lambda: bundled("workload", "resnet50_dp.txt"), (
        ((2, 2), "compute"), ((5, 8), "compute"), ((7, 11), "compute"), ((10, 10), "bytes"),
        ((4, 9), "comm"), ((0, 0), "parallelism"), ((1, 0), "layers")),
        _run("ring8"), _simulate("ring8")),
    Format("yaml_graph", ".yml", lambda: copy.deepcopy(GRAPH), (
        (("ops", 0, "duration"), "duration"), (("ops", 1, "size"), "size"),
        (("ops", 1, "collective"), "choice"), (("ops", 0, "kind"), "choice"),
        (("ops", 1, "deps"), "ids"), (("ops", 1, "dims"), "ids"), (("ops", 0, "id"), "id"),
        (("ops", 2, "remote"), "bool"), (("ops",), "list")),
        _run("ring8"), _simulate("ring8")),
    Format("transformer", ".yml", lambda: bundled("workload", "gpt3_3d.yml"), (
        (("layers",), "count1"), (("hidden",), "count1"), (("micro_batches",), "count1"),
        (("tp",), "count1"), (("sp",), "bool"), (("schedule",), "choice"),
        (("roofline", "efficiency"), "positive"), (("roofline",), "mapping"),
        (("generator",), "choice")),
        _run("gpt_1024"), _simulate("gpt_1024")),
    Format("dlrm", ".yml", lambda: bundled("workload", "dlrm_128.yml"), (
        (("batch_per_npu",), "count1"), (("pooling",), "count1"),
        (("roofline", "peak_tflops"), "positive"), (("top_mlp",), "list"),
        (("bottom_mlp",), "list")),
        _run("hier_128"), _simulate("hier_128")),
    Format("comm_group", ".json", lambda: {"1": [0, 1]}, ((("1",), "ranks"),),
           _run("ring2.yml", "--comm-group"),
           _simulate("ring2.yml", comm_groups="traces/t")),
    Format("memory", ".json", lambda: dict(MEMORY), (
        (("memory-type",), "choice"), (("remote-mem-latency",), "nonneg"),
        (("remote-mem-bw",), "positive"), (("num-npus-per-node",), "count1"),
        (("num-nodes",), "count1")),
        _run("ring8", "--memory"), _simulate("ring8", memory="memwork.yml")),
    Format("fabric", ".yml", lambda: bundled("network", "dgx_pod_64_leafspine_4to1.yml"), (
        (("fabric", "hosts"), "hosts"), (("fabric", "nic", "bandwidth"), "positive"),
        (("fabric", "nic", "latency"), "nonneg"), (("fabric", "generator"), "choice"),
        (("fabric", "oversubscription"), "ratio"), (("fabric", "spines"), "count1"),
        (("fabric", "scale_up", "bandwidth"), "positive"),
        (("fabric", "routing"), "choice_not_none"), (("fabric", "logical_dims"), "dims")),
        _collective("--network"), _network),
    Format("explicit_fabric", ".yml", lambda: copy.deepcopy(EXPLICIT_FABRIC), (
        (("fabric", "npus"), "count2"), (("fabric", "links", 0, 2), "positive"),
        (("fabric", "links", 0, 3), "nonneg"), (("fabric", "links", 3, "duplex"), "bool"),
        (("fabric", "links", 0, 0), "node"), (("fabric", "switches"), "switches"),
        (("fabric", "links"), "list")),
        _collective("--network"), _network),
    Format("infragraph", ".json", _infragraph, (
        (("infragraph", "instances", 0, "count"), "count_big"),
        (("infragraph", "links", 0, "physical", "bandwidth", "gigabits_per_second"),
         "positive"),
        (("infragraph", "links", 0, "physical", "latency", "us"), "nonneg"),
        (("infragraph", "edges", 0, "scheme"), "scheme"), (("logical_dims",), "dims"),
        (("routing",), "choice_not_none"), (("default_bandwidth",), "positive_not_none")),
        _collective("--network"), _network),
    Format("sweep", ".yml", _sweep, (
        (("axes", "size", 0), "size"), (("axes",), "axes"), (("zip",), "zip"),
        (("base", "size"), "size"), (("base",), "mapping"), (("base", "network"), "network_ref")),
        lambda path, folder: ["sweep", str(path), "-o", str(folder / "out.nc"), "--jobs", "1",
                              "--no-progress"],
        lambda path, folder: load_spec(path)),
]


def mutated(fmt: Format, path: tuple, value: Any) -> bytes:
    """The base file of ``fmt`` with ``value`` at ``path``."""
    if fmt.text_format:
        return with_token(fmt.base(), path, value).encode()
    return dump(with_value(fmt.base(), path, value), fmt.suffix)


def bad_values(kind: str, text_format: bool) -> list[Any]:
    return BAD_TOKENS[kind] if text_format else BAD[kind]


def safe_id(value: Any) -> str:
    """A short printable test id for a bad value."""
    return re.sub(r"\s+", "", repr(value))[:24]
