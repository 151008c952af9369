"""Reuse of isolated steps in the flow model (``flowsim.system.flow_timer``).

A step whose links carry nothing else while it sends is replayed from its solution alone;
anything that could share its links materialises it. These tests run the same schedules with
and without reuse and demand the same times, finish times, link bytes and busy times.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.system.flow_timer import FlowTimer
from flowsim.system.load import load_system
from flowsim.system.phases import assign_variants, chunk_sizes, collective_phases
from flowsim.system.scheduler import Schedule

NETWORKS = {
    "ring8": {"topology": ["Ring"], "npus_count": [8], "bandwidth": [50], "latency": [500]},
    "switch8": {"topology": ["Switch"], "npus_count": [8], "bandwidth": [50],
                "latency": [500]},
    "fc6": {"topology": ["FullyConnected"], "npus_count": [6], "bandwidth": [25],
            "latency": [200]},
    "ring4_sw4": {"topology": ["Ring", "Switch"], "npus_count": [4, 4],
                  "bandwidth": [100, 25], "latency": [100, 700]},
    # 4 hosts of 2 NPUs, two hosts per leaf, 2:1 oversubscribed to 2 spines (ECMP)
    "leafspine8": {"fabric": {"generator": "leaf_spine", "hosts": 4, "npus_per_host": 2,
                              "scale_up": {"bandwidth": 200, "latency": 150},
                              "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 2,
                              "oversubscription": 2, "spines": 2, "spine_latency": 500}},
}


def _run(network, system, issues, reuse, monkeypatch):
    """Issue collectives ``(at, collective, size, dims[, extra])`` and run; returns the
    schedule. ``extra`` holds ``root`` / ``group`` / ``scope`` and system keys that change
    for that collective only (e.g. another algorithm)."""
    net = flowsim.load_network(network)
    sys_cfg = load_system(system)
    schedule = Schedule(net, sys_cfg, "flow", replay=reuse)

    def issue(collective, size, dims, extra, t=None):
        # ``t`` is the time Schedule.at passes; the collective is issued now
        extra = dict(extra or {})
        where = {k: extra.pop(k) for k in ("root", "group", "scope") if k in extra}
        cfg = load_system(dict(system, **extra)) if extra else sys_cfg
        chunks = assign_variants([collective_phases(net, cfg, collective, c, dims=dims, **where)
                                  for c in chunk_sizes(size, cfg.splits)])
        schedule.issue(chunks, at=schedule.now)

    for at, collective, size, dims, *extra in issues:
        if at == 0:
            issue(collective, size, dims, extra[0] if extra else None)
        else:
            schedule.at(at, issue, collective, size, dims, extra[0] if extra else None)
    schedule.run()
    return schedule


def _step_ends(network, system, issues, monkeypatch) -> list[tuple[int, int, float]]:
    """(collective, step, end) of every barrier step, simulating every flow."""
    ends = []
    step_done = Schedule._step_done

    def spy(self, chunk, plan, index, phase_start, entry, t):
        ends.append((chunk.collective_id, index, t))
        return step_done(self, chunk, plan, index, phase_start, entry, t)

    monkeypatch.setattr(Schedule, "_step_done", spy)
    _run(network, system, issues, False, monkeypatch)
    monkeypatch.setattr(Schedule, "_step_done", step_done)
    return ends


def _compare(a: Schedule, b: Schedule) -> None:
    ends_a = np.array(sorted(a.ledger.collective_end.items()))
    ends_b = np.array(sorted(b.ledger.collective_end.items()))
    np.testing.assert_allclose(ends_a, ends_b, rtol=1e-9)
    np.testing.assert_allclose(a.ledger.npu_finish, b.ledger.npu_finish, rtol=1e-9)
    np.testing.assert_allclose(a.timer.link_bytes, b.timer.link_bytes, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(a.timer.link_busy, b.timer.link_busy, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(a.ledger.dim_busy_ns(), b.ledger.dim_busy_ns(), rtol=1e-9,
                               atol=1e-6)


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("at", [5_000.0, 13_000.0, 37_000.0])
def test_a_second_collective_mid_step_materialises_the_first(monkeypatch, network, at):
    """Two all-reduces on one dimension queue with two chunks in flight, the second issued
    while the first is sending: the first's step goes back into the engine with what it
    has left, and nothing changes."""
    ndims = flowsim.load_network(NETWORKS[network]).ndims
    system = {"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
              "all-reduce-implementation": ["ring"] * ndims}
    issues = [(0, "all_reduce", 1 << 20, None), (at, "all_reduce", 1 << 20, None)]
    reused = _run(NETWORKS[network], system, issues, True, monkeypatch)
    plain = _run(NETWORKS[network], system, issues, False, monkeypatch)
    assert reused.timer.materialised[1] >= 1   # at least one step materialised mid-send
    assert reused.timer.reused_steps > 0 and plain.timer.reused_steps == 0
    _compare(reused, plain)
    # the shared links slowed the first all-reduce down: reuse must not hide that
    alone = _run(NETWORKS[network], system, issues[:1], True, monkeypatch)
    assert reused.ledger.collective_end[0] > alone.ledger.collective_end[0] * 1.02


def test_an_isolated_collective_is_replayed_step_by_step(monkeypatch):
    """A lone ring all-reduce: every step is replayed, the engine sees no flow, and the
    time is the alpha-beta closed form of a ring on a switch."""
    system = {"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"],
              "endpoint-delay": 0}
    net = NETWORKS["switch8"]
    schedule = _run(net, system, [(0, "all_reduce", 8 << 20, None)], True, monkeypatch)
    assert schedule.timer.reused_steps == schedule.timer.steps == 2 * 7
    assert schedule.timer.engine.num_flows == 0
    p, size = 8, 8 << 20
    bandwidth = 50 * 2**30 / 1e9                         # bytes/ns
    per_step = 2 * 500 + size / p / bandwidth            # up and down link of the switch
    assert schedule.ledger.collective_end[0] == pytest.approx(2 * (p - 1) * per_step, rel=1e-9)


issue_strategy = st.tuples(
    st.one_of(st.just(0.0), st.floats(1.0, 150_000.0)),
    st.sampled_from(["all_reduce", "all_to_all", "reduce_scatter", "all_gather"]),
    st.sampled_from([64 << 10, 1 << 20, 3 << 20]),
    st.sampled_from([None, (0,)]),
    st.sampled_from([None, None, "tree"]))


@settings(max_examples=60, deadline=None)
@given(network=st.sampled_from(sorted(NETWORKS)),
       algorithm=st.sampled_from(["ring", "direct", "halvingDoubling"]),
       active=st.integers(1, 3), splits=st.integers(1, 3),
       reduction=st.sampled_from([0, 0, 20_000]),
       issues=st.lists(issue_strategy, min_size=1, max_size=3))
def test_reuse_never_changes_a_result(network, algorithm, active, splits, reduction, issues):
    """Random overlapping collectives on small systems: same results with and without reuse
    (the hypothesis runs cover steps replayed whole, materialised before they start and
    materialised mid-send)."""
    if algorithm == "halvingDoubling" and network == "fc6":
        algorithm = "ring"  # halving-doubling needs a power of two
    ndims = flowsim.load_network(NETWORKS[network]).ndims
    system = {"active-chunks-per-dimension": active, "preferred-dataset-splits": splits,
              "all-reduce-implementation": [algorithm] * ndims,
              "reduce-scatter-implementation": [algorithm] * ndims,
              "all-gather-implementation": [algorithm] * ndims,
              "all-to-all-implementation": ["direct" if algorithm != "ring" else "ring"] * ndims}
    if reduction:
        system.update({"model-shared-bus": 1, "local-reduction-delay": reduction})
    # some all-reduces as double binary trees (per-NPU phases, which turn replay off)
    trees = all(p & (p - 1) == 0 for p in flowsim.load_network(NETWORKS[network]).dims)
    issues = [(at, c, size, dims, {"all-reduce-implementation": ["doubleBinaryTree"] * ndims}
               if tree and trees and c == "all_reduce" else None)
              for at, c, size, dims, tree in issues]
    with pytest.MonkeyPatch.context() as mp:
        reused = _run(NETWORKS[network], system, issues, True, mp)
        plain = _run(NETWORKS[network], system, issues, False, mp)
    _compare(reused, plain)


@pytest.mark.parametrize("workload,network,iterations", [
    ("resnet50_dp", "dgx_pod_64_leafspine_4to1", 1),
    ("microbench_allreduce", "switch16_inr", 3),
])
def test_workloads_agree_with_and_without_reuse(monkeypatch, workload, network, iterations):
    out = {}
    for reuse in (True, False):
        out[reuse] = flowsim.simulate(network, workload, model="flow", iterations=iterations,
                                      replay=reuse)
    assert out[True].data_vars.keys() == out[False].data_vars.keys()
    for name, values in out[True].data_vars.items():   # times, shares, dimension bytes
        np.testing.assert_allclose(values.values, out[False][name].values, rtol=1e-9,
                                   atol=1e-6, err_msg=name)


@pytest.mark.parametrize("at", [10_000.0, 30_000.0, 47_000.0])
def test_a_replayed_phase_resumes_in_a_gap_between_steps(monkeypatch, at):
    """Long endpoint delays leave gaps between steps; a collective arriving in a gap hands
    the replayed phase back to the scheduler at its next step, with the same result as
    simulating every step."""
    system = {"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
              "all-reduce-implementation": ["ring"], "endpoint-delay": 20_000}
    issues = [(0, "all_reduce", 1 << 20, None), (at, "all_reduce", 1 << 20, None)]
    reused = _run(NETWORKS["switch8"], system, issues, True, monkeypatch)
    plain = _run(NETWORKS["switch8"], system, issues, False, monkeypatch)
    assert reused.timer.resumed_phases >= 1
    _compare(reused, plain)


def test_resuming_a_phase_names_the_step_it_is_in(monkeypatch):
    """``resume(index, release)``: finished steps count as done, the release is the end of
    the last finished one (or the phase start), and after the last step it is the end."""
    net = flowsim.load_network(NETWORKS["switch8"])
    sys_cfg = load_system({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"],
                           "endpoint-delay": 1_000})
    phase = collective_phases(net, sys_cfg, "all_reduce", 1 << 20)[0]
    for probe, expected_index in ((0.0, 0), (0.5, 0), (1.5, 1), (13.99, 13), (14.2, 14)):
        schedule = Schedule(net, sys_cfg, "flow")
        plan = schedule.shapes.plan(phase)
        timer = schedule.timer
        calls = []
        token = timer.whole_phase(plan, 0.0, lambda i, r, calls=calls: calls.append((i, r)))
        ends = [step.end for step in timer._virtual_phases[token].steps]
        assert len(ends) == 2 * 7
        # probe k.x: x of the way from the end of step k-1 to the end of step k
        k, frac = int(probe), probe - int(probe)
        before = 0.0 if k == 0 else ends[k - 1]
        timer.engine.skip_to(before + frac * ((ends[k] if k < len(ends) else before + 1.0)
                                              - before))
        timer._materialise_phase(token)
        index, release = calls[0]
        assert index == expected_index
        assert release == (0.0 if index == 0 else ends[index - 1])


TINY_TRANSFORMER = {"generator": "transformer", "layers": 8, "hidden": 1024, "sequence": 512,
                    "heads": 16, "micro_batch": 1, "micro_batches": 4, "tp": 8,
                    "schedule": "1f1b", "scatter_gather": False, "roofline": {"peak_tflops": 312,
                                                     "memory_bandwidth_GBps": 2039,
                                                     "efficiency": 0.5}}


@pytest.mark.parametrize("parallel", [{"dp": 1, "pp": 8}, {"dp": 8, "pp": 1}])
def test_pipeline_messages_on_a_shared_fabric(monkeypatch, parallel):
    """Pipeline-parallel sends between hosts share leaf and spine links (ECMP over several
    paths): steps are materialised mid-send, and every output matches simulating every
    flow."""
    spec = dict(TINY_TRANSFORMER, **parallel)
    out, timers = {}, []
    init = FlowTimer.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        timers.append(self)

    monkeypatch.setattr(FlowTimer, "__init__", recording_init)
    for reuse in (True, False):
        out[reuse] = flowsim.simulate("dgx_pod_64_leafspine_4to1", spec, model="flow",
                                      iterations=2, replay=reuse)
    if parallel["pp"] > 1:
        assert timers[0].materialised[1] > 0
    for name, values in out[True].data_vars.items():
        np.testing.assert_allclose(values.values, out[False][name].values, rtol=1e-9,
                                   atol=1e-6, err_msg=name)


# ---------------------------------------------------------------- found in review
TREE = {"all-reduce-implementation": ["doubleBinaryTree"]}


@pytest.mark.parametrize("at", [5_000.0, 13_000.0])
def test_a_tree_issued_mid_phase_keeps_the_bytes_already_sent(monkeypatch, at):
    """A per-NPU (tree) collective turns replay off and hands replayed phases back; the step
    in progress continues with what it has left instead of starting over."""
    system = {"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
              "all-reduce-implementation": ["ring"]}
    issues = [(0, "all_reduce", 1 << 20, None), (at, "all_reduce", 1 << 20, None, TREE)]
    reused = _run(NETWORKS["switch8"], system, issues, True, monkeypatch)
    plain = _run(NETWORKS["switch8"], system, issues, False, monkeypatch)
    assert reused.timer.resumed_phases >= 1
    _compare(reused, plain)


def test_two_phases_handed_back_by_one_tree(monkeypatch):
    """A tree arriving while two replayed phases hold claims one after the other on the
    same links: both are handed back (this raised KeyError)."""
    system = {"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
              "endpoint-delay": 20_000, "all-reduce-implementation": ["ring"]}
    alone = _run(NETWORKS["switch8"], system, [(0, "all_reduce", 1 << 20, None)], True,
                 monkeypatch)
    last_arrival = alone.ledger.collective_end[0] - 20_000
    issues = [(0, "all_reduce", 1 << 20, None),
              (last_arrival - 3_000, "all_reduce", 1 << 20, None),
              (last_arrival - 1_000, "all_reduce", 1 << 20, None, TREE)]
    _compare(_run(NETWORKS["switch8"], system, issues, True, monkeypatch),
             _run(NETWORKS["switch8"], system, issues, False, monkeypatch))


def test_claims_one_after_the_other_on_a_link_are_all_seen(monkeypatch):
    """Local reductions leave a link free between two replayed steps; a later collective
    overlapping the first must materialise it, not only the claim made last."""
    system = {"active-chunks-per-dimension": 3, "preferred-dataset-splits": 1,
              "endpoint-delay": 10, "scheduling-policy": "FIFO", "model-shared-bus": 1,
              "local-reduction-delay": 20_000, "all-reduce-implementation": ["ring"],
              "reduce-scatter-implementation": ["ring"], "all-gather-implementation": ["ring"]}
    group = {"group": (0, 1, 2, 3)}
    base = [(0, "all_gather", 256 << 10, None, group), (0, "reduce_scatter", 1 << 20, None,
                                                         group)]
    first_end = _step_ends(NETWORKS["switch8"], system, base, monkeypatch)[0][2]
    issues = base + [(first_end, "all_gather", 64 << 10, None, {"group": (0, 1)})]
    _compare(_run(NETWORKS["switch8"], system, issues, True, monkeypatch),
             _run(NETWORKS["switch8"], system, issues, False, monkeypatch))


def test_a_resumed_step_is_not_restarted_by_a_later_real_step(monkeypatch):
    """A real step queued on a phase's links for after its end must not make the phase's
    step in progress start over when the phase is handed back."""
    system = {"active-chunks-per-dimension": 4, "preferred-dataset-splits": 1,
              "endpoint-delay": 10, "scheduling-policy": "FIFO", "model-shared-bus": 1,
              "local-reduction-delay": 60_000,
              "reduce-scatter-implementation": ["halvingDoubling"],
              "all-gather-implementation": ["ring"], "all-to-all-implementation": ["direct"]}
    base = [(0, "reduce_scatter", 1 << 20, None, {"group": (0, 1, 2, 3)}),
            (0, "all_to_all", 4 << 20, None, {"group": (0, 1)})]
    ends = _step_ends(NETWORKS["ring8"], system, base, monkeypatch)
    first = next(t for c, i, t in ends if c == 0 and i == 0)
    issues = base + [(first - 1_000, "all_gather", 256 << 10, None, {"group": (1, 2)}),
                     (first, "all_gather", 64 << 10, None, {"group": (1, 2)})]
    reused = _run(NETWORKS["ring8"], system, issues, True, monkeypatch)
    _compare(reused, _run(NETWORKS["ring8"], system, issues, False, monkeypatch))
    assert reused.timer.resumed_phases >= 1


def test_timers_fire_on_time_beside_per_npu_collectives(monkeypatch):
    """``Schedule.run`` with a per-NPU (tree) collective issued up front: a timer due at
    5 us fires at 5 us."""
    net = flowsim.load_network(NETWORKS["switch8"])
    ring = load_system({"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
                        "all-reduce-implementation": ["ring"]})
    tree = load_system({"active-chunks-per-dimension": 2, "preferred-dataset-splits": 1,
                        **TREE})
    schedule = Schedule(net, ring, "flow")

    def chunks(cfg):
        return assign_variants([collective_phases(net, cfg, "all_reduce", 1 << 20)])

    fired = []
    schedule.issue(chunks(tree), at=0.0)

    def later(t):
        fired.append((t, schedule.now))
        schedule.issue(chunks(ring), at=schedule.now)

    schedule.at(5_000.0, later)
    schedule.run()
    assert fired == [(5_000.0, 5_000.0)]
    assert schedule.ledger.collective_end[1] > 5_000.0


def test_a_phase_with_no_groups_takes_no_time(monkeypatch):
    """An all-reduce scoped to NPUs whose second dimension has no group left: the empty
    steps end when they start, with or without replay (simulating every flow hung), and
    cost only their endpoint delays."""
    net = {"topology": ["Switch", "Switch"], "npus_count": [4, 2], "bandwidth": [100, 25],
           "latency": [100, 700]}
    system = {"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring", "ring"]}
    issues = [(0, "all_reduce", 1 << 20, None, {"scope": (4, 5, 6, 7)})]
    reused = _run(net, system, issues, True, monkeypatch)
    plain = _run(net, system, issues, False, monkeypatch)
    _compare(reused, plain)
    only_dim0 = _run(net, system, [(0, "all_reduce", 1 << 20, (0,), {"scope": (4, 5, 6, 7)})],
                     False, monkeypatch)
    extra = plain.ledger.collective_end[0] - only_dim0.ledger.collective_end[0]
    assert 0 < extra <= 4 * 10   # a few endpoint delays (10 ns), no transfer
