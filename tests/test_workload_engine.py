"""The training-loop engine on small hand-computable cases, its options and its bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import pure, ring
from flowsim import ConfigError, FlowsimWarning, load_network, load_workload, simulate
from flowsim.cli import main
from flowsim.units import network_bandwidth_to_bytes_per_ns
from flowsim.workload import Op, Program, Workload, spmd
from flowsim.workload.astra_text import parse_astra_text

B = network_bandwidth_to_bytes_per_ns(50.0)  # bytes/ns of a 50 GB/s link


def ring_all_reduce_ns(p: int, size: float, lat: float = 500.0) -> float:
    """Closed form of a ring all-reduce with no endpoint delay (see DESIGN.md)."""
    return 2 * (p - 1) / p * size / B + 2 * (p - 1) * lat


def text(body: str, kind: str = "DATA") -> str:
    lines = body.strip().splitlines()
    return f"{kind}\n{len(lines)}\n" + "\n".join(lines) + "\n"


ONE_LAYER = text("L0 -1 1000 NONE 0 500 NONE 0 2000 ALLREDUCE 800000 0")


def test_one_layer_data_parallel_loop_by_hand():
    """fwd [0, 1000], one-cycle transition, wg [1001, 3001], then the all-reduce; the end-of-run
    wait blocks from 3002 until it finishes."""
    ds = simulate(ring(4), parse_astra_text(ONE_LAYER), pure())
    allreduce = ring_all_reduce_ns(4, 800000)
    assert float(ds.time_ns) == pytest.approx(3001 + allreduce)
    assert float(ds.compute_ns[0]) == 3000
    assert float(ds.blocked_comm_ns[0]) == pytest.approx(3001 + allreduce - 3002)
    assert float(ds.layer_exposed_comm_ns.sel(layer="L0", **{"pass": "wg"})) == \
        pytest.approx(allreduce - 1)


def test_flow_model_agrees_when_nothing_shares_a_link():
    workload = parse_astra_text(text("""
        L0 -1 1000 NONE 0 500 NONE 0 2000 ALLREDUCE 800000 0
        L1 -1 3000 NONE 0 700 NONE 0 900 ALLREDUCE 1600000 100"""))
    a = simulate(ring(8), workload, pure(), iterations=2)
    f = simulate(ring(8), workload, pure(), model="flow", iterations=2)
    # by hand, pass 0: fwd 0-1000, 1001-4001; wg L1 4002-4902 issues AR(1.6 MB), ig L1
    # 4903-5603, wg L0 5604-7604 issues AR(800 kB), which queues behind the first. Pass 1's
    # fwd L0 waits for AR(800 kB) (+0 delay), its fwd L1 for AR(1.6 MB) + 100 ns.
    ar1, ar0 = ring_all_reduce_ns(8, 1600000), ring_all_reduce_ns(8, 800000)
    end_ar1 = 4902 + ar1
    end_ar0 = max(7604, end_ar1) + ar0
    start = max(7605, end_ar0)                       # pass 1, fwd L0
    fwd1 = max(start + 1001, end_ar1 + 100)          # pass 1, fwd L1 starts
    end_pass1 = fwd1 + 3000 + 1 + 900 + 1 + 700 + 1 + 2000
    ar1_b = fwd1 + 3000 + 1 + 900 + ar1              # no queue left by then
    ar0_b = max(end_pass1, ar1_b) + ar0
    assert float(a.time_ns) == pytest.approx(max(ar0_b, ar1_b))
    assert float(f.time_ns) == pytest.approx(float(a.time_ns), rel=1e-9)
    np.testing.assert_allclose(f.exposed_comm_ns, a.exposed_comm_ns, rtol=1e-9)


def test_a_straggler_delays_the_collective_and_exposes_the_others():
    ds = simulate(ring(4), parse_astra_text(ONE_LAYER), pure(), speed=[1, 1, 1, 0.5])
    allreduce = ring_all_reduce_ns(4, 800000)
    # the slow NPU computes 2000 + 4000; the collective starts when it issues it
    assert float(ds.time_ns) == pytest.approx(6001 + allreduce)
    np.testing.assert_allclose(ds.compute_ns, [3000, 3000, 3000, 6000])
    assert float(ds.blocked_comm_ns[0]) == pytest.approx(6001 + allreduce - 3002)
    assert float(ds.blocked_comm_ns[3]) == pytest.approx(allreduce - 1)
    # nothing runs after the end-of-run wait, so exposed = blocked; idle = the two transitions
    np.testing.assert_allclose(ds.exposed_comm_ns, [6001 + allreduce - 3002] * 3 +
                               [allreduce - 1])
    np.testing.assert_allclose(ds.idle_ns, [2.0] * 4)


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_a_straggler_in_a_pipeline_slows_its_stage_and_reaches_the_next(model):
    """One slow GPU in a pipeline stage: its stage's collectives wait for it, so the run takes
    what it takes with the whole stage slow; the other stage receives its activations late
    (it once crashed: the other stage, simulated as one NPU, got the sender's per-NPU array)."""
    net = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
           "latency": [500, 2000]}
    spec = dict(generator="transformer", layers=4, hidden=256, heads=8, sequence=128,
                micro_batch=1, vocab=0, tp=4, pp=2, dp=2, global_batch=8,
                roofline={"peak_tflops": 100, "memory_bandwidth_GBps": 1000})
    base = simulate(net, spec, model=model)
    one = np.ones(16)
    one[5] = 0.5
    stage = next(p.npus for p in load_workload(spec, load_network(net)).programs
                 if 5 in p.npus)
    whole = np.ones(16)
    whole[stage] = 0.5
    slow_one = simulate(net, spec, model=model, speed=one)
    slow_stage = simulate(net, spec, model=model, speed=whole)
    assert float(slow_one.time_ns) > float(base.time_ns)
    assert float(slow_one.time_ns) == float(slow_stage.time_ns)
    assert float(slow_one.finish_ns[5]) == float(slow_stage.finish_ns[5])
    assert float(slow_one.compute_ns[5]) > float(slow_one.compute_ns[stage[stage != 5][0]])


def test_iterations_repeat_a_plain_graph():
    ops = [Op(0, "compute", duration_ns=100.0), Op(1, "compute", duration_ns=50.0, deps=(0,))]
    one = simulate(ring(4), spmd(ops, 4), pure())
    three = simulate(ring(4), spmd(ops, 4), pure(), iterations=3)
    assert float(one.time_ns) == 150 and float(three.time_ns) == 450


@pytest.mark.parametrize("kind, expected", [
    ("none", (1 << 20) / 1600.0),        # local memory, 1600 GB/s, no latency
    ("per_npu", 1000 + (1 << 20) / 10.0),
    ("pool", 4 * (1000 + (1 << 20) / 10.0)),
    ("per_node", 2 * (1000 + (1 << 20) / 10.0)),
])
def test_memory_ops_against_each_remote_memory_kind(kind, expected):
    names = {"none": "NO_MEMORY_EXPANSION", "per_npu": "PER_NPU_MEMORY_EXPANSION",
             "pool": "MEMORY_POOL", "per_node": "PER_NODE_MEMORY_EXPANSION"}
    memory = {"memory-type": names[kind]}
    if kind != "none":
        memory.update({"remote-mem-latency": 1000, "remote-mem-bw": 10,
                       "num-npus-per-node": 2})
    ops = [Op(0, "memory", size=1 << 20, remote=True)]
    system = pure(**{"local-mem-bw": 1600})
    ds = simulate(ring(4), spmd(ops, 4), system, memory=memory)
    assert float(ds.time_ns) == pytest.approx(expected)


def test_collective_streams_cap_serialises_independent_collectives():
    net = {"topology": ["Ring", "Ring"], "npus_count": [4, 4], "bandwidth": [50, 50],
           "latency": [500, 500]}
    ops = [Op(0, "collective", collective="all_reduce", size=800000, dims=(0,)),
           Op(1, "collective", collective="all_reduce", size=800000, dims=(1,))]
    system = pure(**{"all-reduce-implementation": ["ring", "ring"]})
    free = simulate(net, spmd(ops, 16), system)
    capped = simulate(net, spmd(ops, 16), system, collective_streams=1)
    one = ring_all_reduce_ns(4, 800000)
    assert float(free.time_ns) == pytest.approx(one)        # different dimension queues
    assert float(capped.time_ns) == pytest.approx(2 * one)


def test_programs_on_disjoint_npus_never_share_a_dimension_queue():
    """Two pipeline stages (programs on NPUs 0-3 and 4-7) each all-reduce over dimension 0 at
    once: every NPU has its own queues, so neither waits for the other (one chunk in flight
    per dimension and NPU, as in ASTRA-sim), while two collectives of one program on the same
    dimension still take turns."""
    net = {"topology": ["Ring", "Ring"], "npus_count": [4, 2], "bandwidth": [50, 50],
           "latency": [500, 500]}
    system = pure(**{"all-reduce-implementation": ["ring", "ring"]})
    one = ring_all_reduce_ns(4, 800000)

    def op(i: int) -> Op:
        return Op(i, "collective", collective="all_reduce", size=800000, dims=(0,))

    stages = Workload([Program([op(0)], np.arange(4)), Program([op(0)], np.arange(4, 8))])
    assert float(simulate(net, stages, system).time_ns) == pytest.approx(one)
    both = Workload([Program([op(0), op(1)], np.arange(4)), Program([op(0)],
                                                                   np.arange(4, 8))])
    assert float(simulate(net, both, system).time_ns) == pytest.approx(2 * one)


@pytest.mark.parametrize("body, kind, message", [
    ("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0", "PIPELINE", "unknown parallelism keyword"),
    ("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8", "DATA", ":3: a DATA layer line has 12"),
    ("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8.5 0", "DATA", ":3: wg comm size must be"),
    ("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE -8 0", "DATA", ":3: wg comm size must be"),
    ("L0 -1 x NONE 0 1 NONE 0 1 ALLREDUCE 8 0", "DATA", ":3: fwd compute must be"),
    ("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0", "HYBRID_TRANSFORMER", "model_parallel_NPU"),
])
def test_bad_text_workloads_name_file_and_line(tmp_path, body, kind, message):
    path = tmp_path / "w.txt"
    path.write_text(text(body, kind))
    with pytest.raises(ConfigError, match=message) as info:
        simulate(ring(4), path, pure())
    assert "w.txt" in str(info.value)


def test_layer_count_must_match(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("DATA\n0\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n")
    with pytest.raises(ConfigError, match="announces 0 layers, the file has 1"):
        simulate(ring(4), path, pure())
    # fewer lines than announced (aicb's L65B-M1-C05 announces 839, holds 33): those run
    path.write_text("DATA\n2\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n")
    with pytest.warns(FlowsimWarning, match=r"w\.txt:2: the header announces 2 layers, the "
                                            r"file holds 1 layer lines; running those"):
        short = simulate(ring(4), path, pure())
    path.write_text("DATA\n1\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n")
    assert float(short.time_ns) == float(simulate(ring(4), path, pure()).time_ns)


@pytest.mark.parametrize("ops, message", [
    ([Op(0, "compute", deps=(5,))], "depends on node 5, which does not exist"),
    ([Op(0, "compute", deps=(1,)), Op(1, "compute", deps=(0,))], "dependency cycle"),
    ([Op(0, "collective", collective="all_reduce", size=8, group=(0, 9))], "communicator"),
    ([Op(0, "collective", collective="all_reduce", size=8, dims=(3,))], "dimension 3"),
    ([Op(0, "compute", duration_ns=-1.0)], "duration_ns must be"),
])
def test_bad_graphs_name_the_node(ops, message):
    with pytest.raises(ConfigError, match=message):
        simulate(ring(4), spmd(ops, 4), pure())


def test_a_send_without_recv_is_reported_as_a_pair():
    work = Workload([Program([Op(0, "send", peer_offset=2, size=8)], [0, 1], "first"),
                     Program([Op(0, "compute", duration_ns=1.0)], [2, 3], "second")])
    with pytest.raises(ConfigError, match="first: node 0 .*from NPU 0 to NPU 2 with tag 0 "
                                          "has no matching recv on NPU 2"):
        simulate(ring(4), work, pure())


def test_pairs_split_across_programs_match_npu_by_npu():
    # the sends of one 2-NPU program are received by two 1-NPU programs: the per-program
    # summary does not balance, the per-NPU pairs do (validation falls back to them)
    from flowsim.workload.validate import _check_pairs, _pairs_balance_by_program

    send = Op(0, "send", peer_offset=2, size=8)
    work = Workload([Program([send], [0, 1], "senders"),
                     Program([Op(0, "recv", peer_offset=-2, size=8)], [2], "r2"),
                     Program([Op(0, "recv", peer_offset=-2, size=8)], [3], "r3")])
    assert not _pairs_balance_by_program(work)
    _check_pairs(work, ring(4))
    # one receiver short: caught per NPU
    with pytest.raises(ConfigError, match="no matching recv on NPU 3"):
        _check_pairs(Workload(work.programs[:2]), ring(4))
    # a pipeline's programs pair up program by program
    pipeline = Workload([Program([send], [0, 1], "stage0"),
                         Program([Op(0, "recv", peer_offset=-2, size=8)], [2, 3], "stage1")])
    assert _pairs_balance_by_program(pipeline)


@pytest.mark.parametrize("kwargs, key", [
    ({"iterations": 0}, "iterations"), ({"speed": [1, 0, 1, 1]}, "speed"),
    ({"collective_streams": 0}, "collective_streams"), ({"compute_scale": -1}, "compute_scale"),
])
def test_bad_arguments(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        simulate(ring(4), parse_astra_text(ONE_LAYER), pure(), **kwargs)


def test_cli_run_writes_dataset_csv_and_trace(tmp_path, capsys):
    workload = tmp_path / "w.txt"
    workload.write_text(ONE_LAYER)
    out = tmp_path / "out"
    assert main(["run", "--workload", str(workload), "--iterations", "2", "-o",
                 str(tmp_path / "r.nc"), "--csv", str(out), "--trace",
                 str(tmp_path / "t.json")]) == 0
    printed = capsys.readouterr().out
    assert "2 iteration(s)" in printed and "exposed comm" in printed
    rows = (out / "end_to_end.csv").read_text().splitlines()
    assert rows[0].startswith("layer,fwd_compute_us") and rows[1].startswith("L0,2.0")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["name"] for e in events} >= {"L0.fwd", "L0.wg", "L0.wg.all_reduce"}
    assert main(["run", "--workload", str(workload), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["time_ns"] > summary["compute_ns"] == 3000


def test_cli_run_default_runs_a_bundled_workload(capsys):
    assert main(["run"]) == 0
    assert "resnet50_dp" in capsys.readouterr().out


def test_cli_run_bad_workload_is_one_line(tmp_path, capsys):
    path = tmp_path / "w.txt"
    path.write_text("NOPE\n")
    assert main(["run", "--workload", str(path)]) == 2
    assert "unknown parallelism keyword" in capsys.readouterr().err


def test_custom_collective_trace_runs_in_place_of_the_native_algorithm():
    """ASTRA-sim's example: a ring all-reduce given as 8 per-rank send/recv traces (14 sends
    of 1 MiB / 8 in one chain per rank, with 7 reduction nodes of 7 us), selected by the
    system json's all-reduce-implementation-custom."""
    from conftest import VALIDATION

    examples = VALIDATION / "astra_sim" / "examples"
    system = json.loads((examples / "custom_collectives" / "custom_collective.json").read_text())
    system["all-reduce-implementation-custom"] = [str(
        examples / "custom_collectives" / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce")]
    workload = examples / "microbenchmarks" / "all_reduce" / "8npus_1MB" / "all_reduce"
    network = examples / "configs" / "Ring_8npus.yml"
    message = 10 + 500 + (1 << 20) / 8 / network_bandwidth_to_bytes_per_ns(50.0) + 10
    for model in ("analytical", "flow"):
        ds = simulate(network, workload, system, model=model)
        assert float(ds.time_ns) == pytest.approx(14 * message + 7 * 7000.0)
        assert ds.attrs["messages"] == 8 * 14


def test_custom_collective_with_the_wrong_rank_count_is_an_error(tmp_path):
    from conftest import VALIDATION
    from flowsim import SimulationError

    prefix = VALIDATION / "astra_sim" / "examples" / "custom_collectives" / \
        "custom_ring_allreduce_8npus_1MB" / "custom_allreduce"
    ops = [Op(0, "collective", collective="all_reduce", size=1 << 20)]
    with pytest.raises(SimulationError, match="has 8 ranks"):
        simulate(ring(4), spmd(ops, 4), pure(**{"all-reduce-implementation-custom":
                                                 [str(prefix)]}))


BUNDLED = {"resnet50_dp": "ring8", "microbench_allreduce": "ring8", "dlrm_128": "hier_128",
           "gpt3_3d": "gpt_1024"}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_workloads_build_and_validate(name):
    from flowsim import load_network, load_workload
    from flowsim.workload.validate import check_workload

    network = load_network(BUNDLED[name])
    workload = load_workload(name, network)
    check_workload(workload, network)
    assert sum(len(p.ops) for p in workload.programs) > 0


@pytest.mark.parametrize("name", ["resnet50_dp", "microbench_allreduce", "dlrm_128"])
def test_bundled_workloads_run_under_both_models(name):
    analytical = simulate(BUNDLED[name], name)
    flow = simulate(BUNDLED[name], name, model="flow")
    if name == "microbench_allreduce":  # ASTRA-sim 2.x: 2326112 ns (validation cases.csv)
        assert float(analytical.time_ns) == pytest.approx(2326112, rel=1e-4)
    assert float(analytical.time_ns) > float(analytical.compute_ns.max())
    # these platforms have no shared links under their mappings: both models agree
    assert float(flow.time_ns) == pytest.approx(float(analytical.time_ns), rel=1e-6)


def test_custom_collectives_back_to_back_in_per_rank_programs():
    """Two custom all-reduces in a row on one-NPU programs take twice one: the ranks of the
    first must not count as NPUs the second waits for."""
    from conftest import VALIDATION

    examples = VALIDATION / "astra_sim" / "examples"
    prefix = examples / "custom_collectives" / "custom_ring_allreduce_8npus_1MB" / \
        "custom_allreduce"
    system = {"preferred-dataset-splits": 1, "all-reduce-implementation-custom": [str(prefix)]}
    programs = [Program([Op(0, "collective", collective="all_reduce", size=1 << 20),
                         Op(1, "collective", collective="all_reduce", size=1 << 20, deps=(0,))],
                        [rank], f"rank{rank}") for rank in range(8)]
    network = examples / "configs" / "Ring_8npus.yml"
    one = simulate(network, Workload([Program(p.ops[:1], p.npus, p.source) for p in programs]),
                   system)
    two = simulate(network, Workload(programs), system)
    assert float(two.time_ns) == pytest.approx(2 * float(one.time_ns))


def test_scales_apply_to_every_workload_format():
    ops = [Op(0, "compute", duration_ns=1000.0),
           Op(1, "collective", collective="all_reduce", size=800000, deps=(0,))]
    base = simulate(ring(4), spmd(ops, 4), pure())
    scaled = simulate(ring(4), spmd(ops, 4), pure(), compute_scale=0.5, comm_scale=2)
    assert float(scaled.compute_ns[0]) == 500
    assert float(scaled.time_ns) == pytest.approx(500 + ring_all_reduce_ns(4, 1600000))
    assert float(base.time_ns) == pytest.approx(1000 + ring_all_reduce_ns(4, 800000))
    text = simulate(ring(4), parse_astra_text(ONE_LAYER), pure(), compute_scale=2)
    assert float(text.compute_ns[0]) == 6000


@pytest.mark.parametrize("ops, message", [
    ([Op(0, "compute", flops=1e9)], "needs a roofline"),
    ([Op(0, "collective", collective="all_reduce", size=8, group=(0, 1))],
     "must be the NPUs that run this op"),
])
def test_more_bad_graphs(ops, message):
    with pytest.raises(ConfigError, match=message):
        simulate(ring(4), spmd(ops, 4), pure())


def test_mismatched_collectives_and_message_sizes_are_errors():
    from flowsim import SimulationError

    programs = [Program([Op(0, "collective", collective=c, size=s)], [r], f"rank{r}")
                for r, (c, s) in enumerate([("all_reduce", 1024), ("all_gather", 2048)])]
    with pytest.raises(SimulationError, match="node 0 .*meets node 0 of rank0"):
        simulate(ring(2), Workload(programs), pure())
    pair = [Program([Op(0, "send", peer=1, size=65536)], [0], "sender"),
            Program([Op(0, "recv", peer=0, size=1024)], [1], "receiver")]
    with pytest.raises(SimulationError, match="expects 1024 B, but the matching send"):
        simulate(ring(2), Workload(pair), pure())


def test_memory_config_from_a_file(tmp_path):
    path = tmp_path / "memory.json"
    path.write_text('{"memory-type": "MEMORY_POOL", "remote-mem-latency": 1000, '
                    '"remote-mem-bw": 10}')
    ds = simulate(ring(4), spmd([Op(0, "memory", size=1 << 20, remote=True)], 4), pure(),
                  memory=path)
    assert float(ds.time_ns) == pytest.approx(4 * (1000 + (1 << 20) / 10.0))
    path.write_text('{"memory-type": "SOMETIMES"}')
    with pytest.raises(ConfigError, match="memory.json: key 'memory-type'"):
        simulate(ring(4), spmd([Op(0, "memory", size=8)], 4), pure(), memory=path)


def test_unknown_comm_type_and_bad_bundled_name(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(text("L0 -1 1 NONE 0 1 NONE 0 1 ALLREDUSE 8 0"))
    with pytest.raises(ConfigError, match=":3: wg comm type must be one of"):
        simulate(ring(4), path, pure())
    with pytest.raises(ConfigError, match="resnet50: workload not found .*resnet50_dp"):
        simulate(ring(4), "resnet50", pure())


def test_messages_count_as_busy_time_and_fabrics_report_no_dimension_bytes():
    pair = [Program([Op(0, "send", peer_offset=2, size=1 << 20)], [0, 1], "senders"),
            Program([Op(0, "recv", peer_offset=-2, size=1 << 20)], [2, 3], "receivers")]
    ds = simulate(ring(4), Workload(pair), pure())
    assert float(ds.dim_busy_ns[0]) == pytest.approx(float(ds.time_ns))
    fabric = simulate("dgx_pod_64_leafspine_4to1", "microbench_allreduce")
    assert np.isnan(fabric.dim_bytes).all() and float(fabric.time_ns) > 0


def test_cli_run_options_are_checked_before_running(tmp_path, capsys):
    assert main(["run", "-o", str(tmp_path / "no" / "x.nc")]) == 2
    assert "argument -o: folder" in capsys.readouterr().err
    (tmp_path / "f").write_text("")
    assert main(["run", "--csv", str(tmp_path / "f")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["run", "--roofline", "fast"]) == 2
    assert "argument --roofline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--iterations", "0"])
    assert "argument --iterations: expected an integer >= 1" in capsys.readouterr().err


def test_cli_roofline_times_flop_ops(tmp_path, capsys):
    path = tmp_path / "w.yml"
    path.write_text("ops:\n  - {id: 0, kind: compute, flops: 1.0e12, bytes: 1000}\n")
    assert main(["run", "--workload", str(path), "--roofline", "100,1000,0.5", "--json"]) == 0
    # 1e12 FLOP at 100 TFLOP/s and 50% efficiency: 20 ms
    assert json.loads(capsys.readouterr().out)["time_ns"] == pytest.approx(2e7)


def test_readme_yaml_example_runs(tmp_path):
    """The graph example of the Training workloads page (docs/guide/workloads.md), as
    printed there."""
    from conftest import REPO

    readme = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = readme.index("```yaml\nname: two stages") + len("```yaml\n")
    path = tmp_path / "two_stages.yml"
    path.write_text(readme[start: readme.index("```", start)])
    ds = simulate("ring8", path, roofline={"peak_tflops": 312, "memory_bandwidth_GBps": 2039,
                                           "efficiency": 0.5})
    # stage 1 receives 64 KiB before it computes; its remote memory op has no expansion here
    assert float(ds.compute_ns[4]) == 2000 and float(ds.time_ns) > float(ds.compute_ns[0])


@pytest.mark.parametrize("bad", ["abc", -1.0, float("nan"), float("inf")])
def test_op_times_that_are_not_non_negative_numbers_name_file_and_node(bad):
    """A duration that is text, negative, NaN or infinite: one ConfigError naming the file,
    the node and the value (text used to escape as a TypeError)."""
    from flowsim import load_network
    from flowsim.workload.validate import check_workload

    work = Workload([Program([Op(0, "compute", "x", duration_ns=bad)], np.arange(8),
                             source="my.yml")])
    with pytest.raises(ConfigError, match=r"my\.yml: node 0 \(x\): duration_ns must be a "
                                          r"non-negative number, found"):
        check_workload(work, load_network("ring8"))


def test_a_program_scope_hashes_like_its_tuple_and_only_once():
    from flowsim.system.phases import NpuSet

    scope = NpuSet(range(1024))
    plain = tuple(range(1024))
    assert scope == plain and hash(scope) == hash(plain)
    assert {plain: "queue"}[scope] == "queue" and {scope: 1}[plain] == 1
    assert scope.__dict__["hash"] == hash(plain)   # kept after the first hash
    assert NpuSet(range(3)) != NpuSet(range(4))
    # a pipeline stage's state carries its scope as an NpuSet; the whole network none
    net = load_network(ring(4))
    work = Workload([Program([Op(0, "compute", duration_ns=1.0)], [0, 1], "a"),
                     Program([Op(0, "compute", duration_ns=1.0)], [2, 3], "b")])
    from flowsim.system.program_state import program_state

    assert isinstance(program_state(0, work.programs[0], net.npus).scope, NpuSet)
    assert program_state(0, spmd([Op(0, "compute", duration_ns=1.0)], 4).programs[0],
                         net.npus).scope == ()
