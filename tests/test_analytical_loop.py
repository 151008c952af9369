"""The compiled analytical event loop equals the Python engine to the bit.

:mod:`flowsim.system.analytical_loop` runs the analytical model's training loop in Numba;
every record it returns must be the one :class:`~flowsim.system.workload_engine.
WorkloadEngine` writes, on every kind of workload it takes (generators, ASTRA-sim text,
random graphs), and it must hand everything else (and every run that fails) to the Python
engine. ``FLOWSIM_COMPARE_LOOPS=1 pytest`` runs the whole suite this way.
"""

from __future__ import annotations

import importlib
import json

import numba  # noqa: F401  -- loaded, the compiled loop takes runs of any size
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowsim
from conftest import REPO, loaded_after, ring, same_records
from flowsim.errors import SimulationError
from flowsim.system.analytical_loop import run_compiled
from flowsim.workload.graph import Op, Program, Workload

SIMULATE = importlib.import_module("flowsim.system.simulate")


def both(monkeypatch, network, workload, system=None, **options):
    """Run through :func:`flowsim.run_training`, timing the workload with the Python engine
    and the compiled loop; returns (compiled record or None, Python record)."""
    seen: dict = {}
    original = SIMULATE.run_workload

    def spy(net, work, sys_cfg, model, **kw):
        python = original(net, work, sys_cfg, model, compiled=False, **kw)
        seen["records"] = (run_compiled(net, work, sys_cfg, **kw), python)
        return python

    with monkeypatch.context() as patch:
        patch.setattr(SIMULATE, "run_workload", spy)
        flowsim.run_training(network, workload, system, **options)
    return seen["records"]


def assert_same(monkeypatch, network, workload, system=None, **options):
    fast, python = both(monkeypatch, network, workload, system, **options)
    assert fast is not None, "the compiled loop did not take the run"
    assert same_records(fast, python) == []
    return python


#: hypothesis settings of the random workloads (each example runs both engines)
RANDOM_CASES = settings(max_examples=60, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_same_on(network, workload) -> None:
    """:func:`assert_same` outside a test's own monkeypatch (hypothesis examples)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_same(monkeypatch, network, workload)


CLUSTER = {"cluster": {"device": "h100_sxm_80gb", "nodes": 4, "gpus_per_node": 8,
                       "nic_gbps": 400, "nics_per_node": 8}}
DENSE = dict(generator="transformer", layers=8, hidden=1024, ffn=4096, heads=16, kv_heads=4,
             vocab=32000, sequence=2048, global_batch=16, micro_batch=1, tp=2, pp=4, dp=4,
             gated_mlp=True, attention="flash", dtype="bf16")
MOE = dict(DENSE, experts=8, top_k=2, ep=4, moe_ffn=1024, pp=2, dp=8, vpp=2, layers=8)


@pytest.mark.parametrize("spec", [
    DENSE,
    dict(DENSE, vpp=2),
    dict(DENSE, schedule="gpipe"),
    dict(DENSE, distributed_optimizer=True, overlap_grad_reduce=True,
         overlap_param_gather=True, sp=True),
    dict(DENSE, recompute="full"),
    dict(DENSE, cp=2, dp=2),
    dict(DENSE, pp=1, dp=16, tp=2),
    MOE,
    dict(MOE, moe_a2a_overlap=True),
], ids=["1f1b", "interleaved", "gpipe", "distopt", "recompute", "cp", "dp", "moe",
        "moe-a2a-overlap"])
def test_transformer_runs_equal_the_python_engine(monkeypatch, spec):
    python = assert_same(monkeypatch, CLUSTER, spec, "nccl")
    assert python.time_ns > 0 and python.collectives > 0


@pytest.mark.parametrize("workload, network, system", [
    ("resnet50_dp.txt", "ring8", None),
    ("microbench_allreduce.txt", "switch16_inr", None),
    ("dlrm_128.yml", "hier_128", None),
    ("gpt3_3d.yml", "gpt_1024", None),
    ("resnet50_dp.txt", "r4_fc8_sw4", "ring_4chunks_3d"),
])
def test_bundled_workloads_equal_the_python_engine(monkeypatch, workload, network, system):
    assert_same(monkeypatch, network, str(REPO / "workloads" / workload), system,
                iterations=2)


@pytest.mark.parametrize("system", [
    {"scheduling-policy": "FIFO", "active-chunks-per-dimension": 2,
     "preferred-dataset-splits": 4},
    {"scheduling-policy": "LIFO", "active-chunks-per-dimension": 1,
     "preferred-dataset-splits": 3, "collective-optimization": "baseline"},
])
def test_queue_policies_and_chunking_equal_the_python_engine(monkeypatch, system):
    spec = dict(DENSE, distributed_optimizer=True, overlap_grad_reduce=True)
    assert_same(monkeypatch, CLUSTER, spec, {**NCCL, **system})


NCCL = json.loads((REPO / "topologies" / "systems" / "nccl.json").read_text())


# ---------------------------------------------------------------------- random graphs
@st.composite
def pipelines(draw):
    """Two SPMD programs (stages) of random compute and collective ops, the first sending
    to the second after random ops; dependencies, control gaps, priorities and layers at
    random."""
    stages = []
    messages = draw(st.lists(st.integers(1, 1 << 20), max_size=3))   # their sizes
    for stage in range(2):
        ops: list[Op] = []
        n = draw(st.integers(1, 12))
        for _ in range(n):
            earlier = list(range(len(ops)))
            deps = tuple(sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=3))))) \
                if earlier else ()
            ctrl = (len(ops) - 1,) if ops and draw(st.booleans()) else ()
            common = dict(id=len(ops), deps=deps, ctrl_deps=ctrl, layer=draw(st.integers(-1, 2)),
                          pass_=draw(st.sampled_from(["fwd", "ig", "wg", ""])),
                          gap_ns=draw(st.sampled_from([0.0, 1.0])))
            if draw(st.booleans()):
                ops.append(Op(kind="compute", duration_ns=draw(st.floats(0, 5e4)), **common))
            else:
                ops.append(Op(kind="collective", collective=draw(st.sampled_from(
                    ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])),
                    size=draw(st.integers(0, 1 << 22)), dims=draw(st.sampled_from(
                        [(0,), (1,), (0, 1)])),
                    priority=draw(st.sampled_from(["default", "LIFO", "FIFO", "highest"])),
                    update_delay_ns=draw(st.sampled_from([0.0, 10.0])), **common))
        for m, size in enumerate(messages):   # stage 0 sends, stage 1 receives, in order
            kind = "send" if stage == 0 else "recv"
            after = (draw(st.integers(0, len(ops) - 1)),)
            ops.append(Op(id=len(ops), kind=kind, size=size,
                          peer_offset=8 if stage == 0 else -8, tag=m, deps=after))
            ops.append(Op(id=len(ops), kind="compute", duration_ns=100.0,
                          deps=(len(ops) - 1,)))
        stages.append(Program(ops, np.arange(8) + 8 * stage, f"<stage {stage}>"))
    return Workload(stages, ["a", "b", "c"], "random")


NETWORK = {"topology": ["Ring", "Switch", "Ring"], "npus_count": [2, 4, 2],
           "bandwidth": [50, 25, 12.5], "latency": [500, 700, 1000]}


@RANDOM_CASES
@given(pipelines())
def test_random_pipelines_equal_the_python_engine(workload):
    assert_same_on(NETWORK, workload)


@st.composite
def ranks(draw):
    """Four one-NPU programs (a trace per rank) meeting in the same collectives, over all
    ranks or in pairs (explicit groups), with compute between them at random; a rank's
    node ids may be shuffled (its collectives keeping their order), which makes its node
    order no issue order."""
    plan = draw(st.lists(st.tuples(st.sampled_from(["all_reduce", "all_gather",
                                                    "reduce_scatter"]),
                                   st.booleans(), st.integers(1, 1 << 22)),
                         min_size=1, max_size=5))
    programs = []
    for rank in range(4):
        specs: list[dict] = []
        last_collective = None
        for collective, pairs, size in plan:
            for _ in range(draw(st.integers(0, 2))):
                deps = draw(st.lists(st.sampled_from(range(len(specs))), max_size=2)) \
                    if specs else []
                specs.append(dict(kind="compute", duration_ns=draw(st.floats(0, 5e4)),
                                  deps=tuple(sorted(set(deps))), layer=draw(st.integers(-1, 1))))
            deps = [len(specs) - 1] if specs else []
            if last_collective is not None and draw(st.booleans()):
                deps.append(last_collective)
            last_collective = len(specs)
            specs.append(dict(kind="collective", collective=collective, size=size,
                              group=((0, 1) if rank < 2 else (2, 3)) if pairs else (),
                              deps=tuple(sorted(set(deps))), update_delay_ns=10.0))
        ids = list(range(len(specs)))
        if draw(st.booleans()):   # shuffled, collectives keeping their relative order
            ids = draw(st.permutations(ids))
            colls = [k for k, sp in enumerate(specs) if sp["kind"] == "collective"]
            for k, new in zip(colls, sorted(ids[k] for k in colls)):
                ids[k] = new
        ops = [Op(id=ids[k], **{**sp, "deps": tuple(ids[d] for d in sp["deps"])})
               for k, sp in enumerate(specs)]
        programs.append(Program(ops, np.array([rank]), f"<rank {rank}>"))
    return Workload(programs, ["a", "b"], "ranks")


FOUR = {"topology": ["Ring", "Switch"], "npus_count": [2, 2], "bandwidth": [50, 25],
        "latency": [500, 900]}


@RANDOM_CASES
@given(ranks())
def test_ranks_meeting_in_collectives_equal_the_python_engine(workload):
    assert_same_on(FOUR, workload)


# ---------------------------------------------------------------------- what it leaves alone
def test_runs_it_does_not_take_go_to_the_python_engine(monkeypatch):
    spec = dict(DENSE, pp=1, dp=16)
    fast, _ = both(monkeypatch, CLUSTER, spec, "nccl", speed=[1.0] * 31 + [0.5])
    assert fast is None   # NPUs of one program at different speeds: per-NPU times
    fast, _ = both(monkeypatch, CLUSTER, spec, {**NCCL, "step-synchronization": "per_npu"})
    assert fast is None


def test_one_rank_programs_beside_bigger_ones_go_to_the_python_engine():
    work = Workload([Program([Op(0, "compute", duration_ns=5.0)], np.arange(3)),
                     Program([Op(0, "compute", duration_ns=7.0)], np.array([3]))])
    net = flowsim.load_network({"topology": ["Ring"], "npus_count": [4], "bandwidth": [50],
                                "latency": [500]})
    assert run_compiled(net, work, flowsim.load_system(None), speed=np.ones(4)) is None


def test_a_deadlock_is_reported_by_the_python_engine(monkeypatch):
    ops = [Op(id=0, kind="recv", size=8, peer_offset=8, tag=0),
           Op(id=1, kind="send", size=8, peer_offset=8, tag=0, deps=(0,))]
    peer = [Op(id=0, kind="recv", size=8, peer_offset=-8, tag=0),
            Op(id=1, kind="send", size=8, peer_offset=-8, tag=0, deps=(0,))]
    workload = Workload([Program(ops, np.arange(8)), Program(peer, np.arange(8) + 8)])
    captured = {}
    original = SIMULATE.run_workload

    def spy(net, work, sys_cfg, model, **kw):
        captured["fast"] = run_compiled(net, work, sys_cfg, **kw)
        return original(net, work, sys_cfg, model, **kw)

    monkeypatch.setattr(SIMULATE, "run_workload", spy)
    with pytest.raises(SimulationError):
        flowsim.run_training(NETWORK, workload)
    assert captured["fast"] is None


def test_a_size_mismatch_is_reported_by_the_python_engine():
    ops = [Op(id=0, kind="send", size=8, peer_offset=8, tag=0)]
    peer = [Op(id=0, kind="recv", size=16, peer_offset=-8, tag=0)]
    workload = Workload([Program(ops, np.arange(8)), Program(peer, np.arange(8) + 8)])
    with pytest.raises(SimulationError, match="expects 16 B"):
        flowsim.run_training(NETWORK, workload)


def test_ring_training_loop_is_taken():
    work = Workload([Program([Op(id=0, kind="compute", duration_ns=10.0),
                              Op(id=1, kind="collective", collective="all_reduce",
                                 size=1 << 20, deps=(0,))], np.arange(8))])
    net = flowsim.load_network(ring(8))
    system = flowsim.load_system(None)
    record = run_compiled(net, work, system, speed=np.ones(8))
    assert record is not None and record.collectives == 1 and record.time_ns > 10.0


def test_small_runs_load_numba_only_once_they_add_up():
    """A one-off small run stays in Python (no Numba start-up); a sweep of them switches to
    the compiled loop once their ops add up, with the same results."""
    code = """
import sys
import flowsim
from flowsim.workload.graph import Op, spmd
ops = [Op(0, "compute", duration_ns=1.0)] + [
    Op(i, "collective", collective="all_reduce", size=1 << 12, deps=(i - 1,))
    for i in range(1, 1000)]
work = spmd(ops, 8)
net = {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50], "latency": [500]}
first = flowsim.run_training(net, work).record.time_ns
assert "numba" not in sys.modules
times = {flowsim.run_training(net, work).record.time_ns for _ in range(25)}
assert times == {first}, (times, first)
"""
    assert loaded_after(code, ("numba",)) == {"numba"}


def test_phase_structures_are_kept_for_the_last_networks():
    from flowsim.system import shapes

    system = flowsim.load_system("nccl")
    nets = [flowsim.load_network(ring(8, bw=10.0 + k)) for k in range(shapes.KEPT_SHAPES + 1)]
    first = shapes.phase_shapes(nets[0], system, lowest_dim_for_flat=True, replicate=True)
    assert shapes.phase_shapes(nets[0], system, lowest_dim_for_flat=True,
                               replicate=True) is first
    assert shapes.phase_shapes(nets[0], system, lowest_dim_for_flat=False,
                               replicate=True) is not first
    for net in nets[1:]:
        shapes.phase_shapes(net, system, lowest_dim_for_flat=True, replicate=True)
    assert shapes.phase_shapes(nets[0], system, lowest_dim_for_flat=True,
                               replicate=True) is not first   # evicted, built again


def test_meetings_keep_their_communicators_order_where_traces_give_one(monkeypatch):
    """Two ranks reach their second collective (an all-gather) at once and their first (an
    all-reduce) after a long compute. Where the traces' node order is an issue order, the
    all-gather waits for the all-reduce, as on one NCCL communicator; where it is not (a
    dependency points to a later node), it is issued as soon as both ranks are in and runs
    during the compute."""
    def ranks(compute_id: int) -> Workload:
        return Workload([Program([
            Op(compute_id, "compute", duration_ns=1e6),
            Op(1, "collective", collective="all_reduce", size=1 << 24, deps=(compute_id,)),
            Op(2, "collective", collective="all_gather", size=1 << 22)],
            np.array([npu]), f"<rank {npu}>") for npu in range(2)])

    net = {"topology": ["Ring"], "npus_count": [2], "bandwidth": [50], "latency": [500]}
    ordered = assert_same(monkeypatch, net, ranks(0)).time_ns
    unordered = assert_same(monkeypatch, net, ranks(3)).time_ns
    gather = assert_same(monkeypatch, net, Workload([Program(
        [Op(0, "collective", collective="all_gather", size=1 << 22)], np.array([npu]))
        for npu in range(2)])).time_ns
    assert ordered == pytest.approx(unordered + gather, rel=0.05)


# ---------------------------------------------------------------------- inputs a review found
RING8 = {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50], "latency": [500]}


def test_a_layer_the_workload_does_not_name_is_an_error_not_a_crash():
    work = Workload([Program([Op(0, "compute", duration_ns=1.0, layer=5)], np.arange(8))],
                    ["only"])
    net = flowsim.load_network(RING8)
    assert run_compiled(net, work, flowsim.load_system(None), speed=np.ones(8)) is None
    with pytest.raises(flowsim.ConfigError, match=r"node 0 \(compute\): layer must index "
                                                  r"the workload's layers \(0\.\.0, or -1 "
                                                  r"for none\), found 5"):
        flowsim.run_training(net, work)


def test_sizes_beyond_64_bits_run_in_the_python_engine():
    work = Workload([Program([Op(0, "collective", collective="all_reduce", size=2 ** 63)],
                             np.arange(8))])
    net = flowsim.load_network(RING8)
    assert run_compiled(net, work, flowsim.load_system(None), speed=np.ones(8)) is None
    assert np.isfinite(flowsim.run_training(net, work).record.time_ns)


def test_configs_built_by_hand_run_as_the_scheduler_reads_them(monkeypatch):
    from flowsim.system.config import SystemConfig

    work = Workload([Program([Op(0, "collective", collective="all_reduce", size=1 << 20),
                              Op(1, "collective", collective="all_gather", size=1 << 16)],
                             np.arange(8))])
    assert_same(monkeypatch, RING8, work, SystemConfig(scheduling_policy="fifo"))
    listed = SystemConfig(implementations=(("all_reduce", ["ring"]),), every_dimension=[])
    work.programs[0].ops.pop()   # that config names the all-reduce's algorithm only
    assert_same(monkeypatch, RING8, work, listed)   # a list inside: its structures not kept


def test_a_run_leaves_the_callers_frozen_objects_frozen():
    import gc

    def run() -> None:
        flowsim.run_training(RING8, Workload([Program(
            [Op(0, "compute", duration_ns=1.0)], np.arange(8))]))

    run()   # first-run imports and caches free objects of their own: not what is checked
    kept = [[] for _ in range(1000)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        run()
        assert gc.get_freeze_count() >= frozen - 10   # (a few frozen objects may be freed)
    finally:
        gc.unfreeze()
    del kept
