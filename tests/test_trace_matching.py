"""Per-rank traces meet in collectives as NCCL matches them (per communicator, in each rank's
node order, whatever the run-time order), and the engine side of real traces: host CPU ops
beside the device's compute, one rank's trace run by every NPU (SPMD)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flowsim
from conftest import VALIDATION, pure, ring
from flowsim import ConfigError, SimulationError, simulate
from flowsim.system import analytical_loop
from flowsim.system.rendezvous import CollectiveRendezvous
from flowsim.system.workload_engine import WorkloadEngine
from flowsim.workload import Op, Program, Workload, spmd
from flowsim.workload.chakra import load_chakra
from flowsim.workload.chakra_spmd import group_shape, spmd_programs, tile

REAL = VALIDATION / "real_inputs"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real inputs not found at {REAL}")
ROOFLINE = {"peak_tflops": 312, "memory_bandwidth_GBps": 2039, "efficiency": 0.5}
MS = 1e6


def coll(op_id: int, group: tuple[int, ...], collective: str = "all_reduce",
         size: int = 1 << 20, deps: tuple[int, ...] = ()) -> Op:
    return Op(op_id, "collective", f"c{op_id}", collective=collective, size=size, group=group,
              deps=deps)


def compute(op_id: int, ns: float, deps: tuple[int, ...] = ()) -> Op:
    return Op(op_id, "compute", f"k{op_id}", duration_ns=ns, deps=deps)


def ranks(*programs: list[Op]) -> Workload:
    return Workload([Program(ops, [r], f"rank{r}") for r, ops in enumerate(programs)])


def ends(workload: Workload, npus: int = 4) -> dict[tuple[int, int], float]:
    """(NPU, op id) -> end time."""
    engine = WorkloadEngine(
        flowsim.load_network(ring(npus)), workload, flowsim.load_system(pure()), "analytical",
        speed=np.ones(npus), timeline=True)
    engine.run()
    return {(int(npu), e["op"].id): float(end) for e in engine.timeline
            for npu, end in zip(e["npus"], np.broadcast_to(e["end"], e["npus"].shape))}


@pytest.fixture
def matched(monkeypatch) -> list[tuple]:
    """Every collective instance issued: (communicator, position, sorted (NPU, node id))."""
    seen: list[tuple] = []
    take = CollectiveRendezvous._take

    def spy(self, comm, k):
        out = take(self, comm, k)
        seen.append((comm, k, tuple(sorted((int(s.npus[0]), o.id) for s, o in out[1]))))
        return out

    monkeypatch.setattr(CollectiveRendezvous, "_take", spy)
    # the Python engine's rendezvous is what is spied on (the compiled loop packs the same
    # meetings ahead: tests/test_analytical_loop.py holds it to the Python engine's bits)
    monkeypatch.setattr(analytical_loop, "run_compiled", lambda *args, **options: None)
    return seen


# ------------------------------------------------------------------------ node-order matching

def test_collectives_pair_in_node_order_not_in_readiness_order():
    # rank 1 reaches its all-gather (node 2) 1 ms before its all-reduce (node 1): run-time
    # matching paired rank 0's all-reduce with rank 1's all-gather (a mismatch error)
    work = ranks([coll(1, (0, 1)), coll(2, (0, 1), "all_gather", 4096)],
                 [compute(0, MS), coll(1, (0, 1), deps=(0,)),
                  coll(2, (0, 1), "all_gather", 4096)],
                 [], [])
    end = ends(work)
    # the all-gather waits for the earlier all-reduce of its communicator to be issued
    assert end[(0, 2)] > MS and end[(1, 2)] > MS
    assert end[(0, 1)] == end[(1, 1)] > MS


def test_independent_communicators_proceed_independently():
    # rank 1 is late for communicator (0, 1); rank 0's later collective on (0, 2) does not
    # wait for it
    work = ranks([coll(1, (0, 1)), coll(2, (0, 2))],
                 [compute(0, MS), coll(1, (0, 1), deps=(0,))],
                 [coll(2, (0, 2))], [])
    end = ends(work)
    assert end[(0, 2)] == end[(2, 2)] < MS < end[(0, 1)]


def test_an_out_of_order_issue_deadlocks_and_says_why():
    # rank 0 issues A then B on communicator (0, 1); rank 1's A waits (through rank 2) for
    # rank 0's W, which waits for B: NCCL would hang, flowsim reports it
    work = ranks([coll(1, (0, 1)), coll(2, (0, 1), "all_gather", 64), coll(3, (0, 2),
                                                                           deps=(2,))],
                 [coll(1, (1, 2)), compute(2, 10.0, (1,)), coll(3, (0, 1), deps=(2,)),
                  coll(4, (0, 1), "all_gather", 64)],
                 [coll(1, (0, 2)), coll(2, (1, 2), deps=(1,))], [])
    with pytest.raises(SimulationError, match=r"(?s)deadlock: .*NPU 0 \(rank0\): node 1 \(c1\) "
                                              r"waits for the other NPUs.*never reached by "
                                              r"NPU\(s\) \[1\].*node 2 \(c2\) waits for "
                                              r"collective #0 of its communicator"):
        ends(work)


def test_a_genuine_mismatch_names_both_nodes_and_npus():
    work = ranks([coll(1, (0, 1))], [coll(7, (0, 1), "all_gather")], [], [])
    with pytest.raises(SimulationError, match=r"node 7 \(all_gather of 1048576 B\) on NPU 1 "
                                              r"meets node 1 of rank0 \(all_reduce of 1048576 "
                                              r"B\) on NPU 0 as collective #0"):
        ends(work)


@needs_real
def test_stg_matching_and_time_do_not_depend_on_readiness_order(matched):
    """Perturb the compute of one rank of the STG trace: every collective still meets the
    same node on every member (TP and DP peers share node ids), and the end-to-end time moves
    only by the perturbation."""
    prefix = REAL / "stg" / "dp2tp2pp2" / "workload"
    network = REAL / "networks" / "ring_8.yml"
    runs = []
    for factor in (1.0, 1 + 1e-9, 0.5, 3.0):
        speed = np.ones(8)
        speed[3] = factor
        del matched[:]
        ds = simulate(network, prefix, roofline=ROOFLINE, speed=speed)
        assert len(matched) == 8 * 90 // 2           # 90 collectives a rank, in pairs
        assert all(len({node for _, node in members}) == 1 for _, _, members in matched)
        runs.append((float(ds.time_ns), sorted(matched)))
    base = runs[0]
    assert all(pairs == base[1] for _, pairs in runs)
    assert runs[1][0] == pytest.approx(base[0], rel=1e-6)
    assert runs[2][0] > base[0]


# ------------------------------------------------------------------------ host CPU ops

def test_host_ops_run_beside_device_compute_one_at_a_time():
    ops = [Op(0, "compute", "cpu0", duration_ns=5000.0, host=True),
           Op(1, "compute", "cpu1", duration_ns=5000.0, host=True),
           Op(2, "compute", "gpu", duration_ns=8000.0),
           Op(3, "compute", "launch", duration_ns=1000.0, deps=(1,))]
    ds = simulate(ring(4), spmd(ops, 4), pure())
    # host: cpu0 [0, 5], cpu1 [5, 10] us; device: gpu [0, 8], launch [10, 11] us
    assert float(ds.time_ns) == 11000.0
    assert float(ds.compute_ns[0]) == 9000.0          # host time is not device compute


@needs_real
def test_pytorch_trace_device_compute_is_its_gpu_kernels():
    from flowsim.workload.chakra_format import read_et

    _, nodes = read_et(REAL / "chakra_pytorch" / "chakra.0.et")
    gpu = sum(max(n["duration_micros"] * 1000.0, 1.0) for n in nodes
              if n["type"] == "COMP_NODE" and not n["attrs"]["is_cpu_op"])
    host = sum(max(n["duration_micros"] * 1000.0, 1.0) for n in nodes
               if n["attrs"]["is_cpu_op"])
    with pytest.warns(flowsim.FlowsimWarning) as caught:
        ds = simulate(REAL / "networks" / "ring_8.yml", REAL / "chakra_pytorch" / "chakra.0.et",
                      spmd=True)
    messages = [str(w.message) for w in caught]
    assert any("14 host-side communication node(s)" in m for m in messages)
    assert any("3664 ctrl_deps of 1 file(s) ignored (1277 name absent nodes, 383 their own "
               "node)" in m for m in messages)
    assert np.allclose(ds.compute_ns, gpu)
    assert max(gpu, host) < float(ds.time_ns) < gpu + host     # host and device overlap
    assert int(ds.attrs["collectives"]) == 7


def test_cpu_comm_nodes_and_dangling_ctrl_deps_are_counted(tmp_path):
    from flowsim.workload.chakra import write_et

    nodes = [{"id": 1, "type": "COMM_COLL_NODE", "duration_micros": 2, "ctrl_deps": [99],
              "attrs": {"is_cpu_op": True}},
             {"id": 2, "type": "COMM_COLL_NODE", "data_deps": [1], "ctrl_deps": [2],
              "attrs": {"is_cpu_op": False, "comm_type": 0, "comm_size": 64}}]
    write_et(tmp_path / "t.0.et", nodes)
    with pytest.warns(flowsim.FlowsimWarning) as caught:
        work = load_chakra(tmp_path / "t.0.et", npus=2, spmd=True)
    first, second = (str(w.message).split(": ", 1)[1] for w in caught)
    assert first.startswith("1 host-side communication node(s) (is_cpu_op")
    assert second.startswith("2 ctrl_deps of 1 file(s) ignored (1 name absent nodes, 1 their "
                             "own node)")
    host, kernel = work.programs[0].ops
    assert (host.kind, host.host, host.duration_ns, host.ctrl_deps) == ("compute", True,
                                                                         2000.0, ())
    assert (kernel.kind, kernel.deps, kernel.ctrl_deps) == ("collective", (1,), ())


# ------------------------------------------------------------------------------- SPMD

@pytest.mark.parametrize("group, npus, shape, of_5", [
    ((0, 1), 8, (2, 1), (4, 5)),             # tensor parallel: consecutive
    ((1, 3), 8, (2, 2), (5, 7)),             # stride 2
    ((0, 4, 8, 12), 16, (4, 4), (1, 5, 9, 13)),
])
def test_spmd_communicators_keep_size_and_stride(group, npus, shape, of_5):
    assert group_shape(group, npus, "w") == shape
    assert tile(shape, 5) == of_5
    every = {tile(shape, n) for n in range(npus)}
    assert sorted(n for g in every for n in g) == list(range(npus))   # a partition


@pytest.mark.parametrize("group, npus, problem", [
    ((0, 1, 3), 8, "not evenly spaced"),
    ((0, 3), 8, r"does not tile the network's 8 NPUs \(.*multiple of 6\)"),
])
def test_spmd_communicators_that_do_not_map_are_refused(group, npus, problem):
    with pytest.raises(ConfigError, match=problem):
        group_shape(group, npus, "w")


def test_spmd_runs_one_trace_on_every_npu(tmp_path):
    from flowsim.workload.chakra import write_et

    write_et(tmp_path / "one.3.et", [
        {"id": 1, "type": "COMP_NODE", "duration_micros": 5},
        {"id": 2, "type": "COMM_COLL_NODE", "data_deps": [1],
         "attrs": {"comm_type": 0, "comm_size": 1 << 20, "pg_name": "7"}}])
    (tmp_path / "one.json").write_text('{"7": [2, 3]}')
    work = load_chakra(tmp_path / "one", npus=8, spmd=True)
    assert [p.ops[1].group for p in work.programs] == [(0, 1), (0, 1), (2, 3), (2, 3),
                                                       (4, 5), (4, 5), (6, 7), (6, 7)]
    ds = simulate(ring(8), tmp_path / "one.3.et", pure(), spmd=True)
    alone = flowsim.simulate_collective(ring(8), "all_reduce", 1 << 20, pure(), group=(0, 1))
    assert float(ds.time_ns) == pytest.approx(5000 + float(alone.time_ns))
    with pytest.raises(ConfigError, match=r"missing trace file\(s\) for rank\(s\) 0, 1, 2, "
                                          r"4, .*SPMD \(--spmd, spmd=True\)"):
        load_chakra(tmp_path / "one", npus=8)
    write_et(tmp_path / "one.4.et", [])
    with pytest.raises(ConfigError, match="SPMD runs one rank's trace on every NPU, and .* "
                                          "has traces of 2 ranks"):
        load_chakra(tmp_path / "one", npus=8, spmd=True)


def test_spmd_refuses_point_to_point(tmp_path):
    from flowsim.workload.chakra import write_et

    write_et(tmp_path / "p.0.et", [{"id": 1, "type": "COMM_SEND_NODE", "attrs": {
        "comm_dst": 1, "comm_tag": 0, "comm_size": 8}}])
    with pytest.raises(ConfigError, match="a send names one peer rank, so this trace cannot "
                                          "run on every NPU"):
        load_chakra(tmp_path / "p.0.et", npus=4, spmd=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spmd_programs([compute(0, 1.0)], 3, "x")[0].npus.tolist() == [0, 1, 2]


def test_host_ops_survive_a_chakra_round_trip(tmp_path):
    from flowsim.workload.chakra import save_chakra

    ops = [Op(0, "compute", "cpu", duration_ns=2000.0, host=True),
           Op(1, "compute", "gpu", duration_ns=1000.0, deps=(0,))]
    save_chakra(spmd(ops, 2), tmp_path / "h", 2)
    back = load_chakra(tmp_path / "h")
    assert [(o.host, o.duration_ns) for o in back.programs[1].ops] == [(True, 2000.0),
                                                                      (False, 1000.0)]
