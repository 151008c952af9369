"""Preparing a workload fast gives what the general paths give: the dependency order of a
program whose ids run in order, the one-pass check of an op's amounts, the generator's shared
kernels tuples, and the collector paused only while a simulation runs."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
import flowsim.system.simulate  # noqa: F401  (the module, not the function of that name)
from flowsim.errors import ConfigError
from flowsim.workload import Op, Program, spmd
from flowsim.workload.generators import transformer
from flowsim.workload.graph import topological_order
from flowsim.workload.validate import _check_amounts, _plain_amounts

TWO_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
             "latency": [500, 2000]}


@st.composite
def dags(draw) -> list[Op]:
    """Ops 0..n-1, each depending (data or control) on some earlier ones."""
    n = draw(st.integers(1, 30))
    ops = []
    for i in range(n):
        earlier = st.lists(st.integers(0, i - 1), max_size=3) if i else st.just([])
        ops.append(Op(id=i, kind="compute", deps=tuple(draw(earlier)),
                      ctrl_deps=tuple(draw(earlier))))
    return ops


@settings(max_examples=200, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_programs_in_id_order_keep_the_order_the_heap_gives(ops, rnd):
    """The fast path (ids are positions) against the general one (the same ops shuffled, so
    ids are not positions): the same order, and every op after what it depends on."""
    fast = [op.id for op in topological_order(Program(ops, [0]))]
    shuffled = list(ops)
    rnd.shuffle(shuffled)
    if [op.id for op in shuffled] == fast:   # still in order: nothing to compare against
        shuffled.reverse()
    general = [op.id for op in topological_order(Program(shuffled, [0]))]
    assert fast == general
    position = {i: k for k, i in enumerate(fast)}
    for op in ops:
        assert all(position[d] < position[op.id] for d in (*op.deps, *op.ctrl_deps))


@pytest.mark.parametrize("ops, message", [
    ([Op(id=0, kind="compute", deps=(1,)), Op(id=1, kind="compute", deps=(0,))],
     "dependency cycle among nodes 0, 1"),
    ([Op(id=0, kind="compute", deps=(5,))], "depends on node 5, which does not exist"),
    ([Op(id=0, kind="compute", deps=(-1,))], "depends on node -1, which does not exist"),
    ([Op(id=0, kind="compute"), Op(id=1, kind="compute", deps=("x",))],
     "depends on node x, which does not exist"),
    ([Op(id=0, kind="compute"), Op(id=1, kind="compute", ctrl_deps=(None,))],
     "depends on node None, which does not exist"),
    ([Op(id=0, kind="compute"), Op(id=0, kind="compute")], "node id 0 appears twice"),
])
def test_programs_the_fast_path_declines_are_still_checked(ops, message):
    with pytest.raises(ConfigError, match=message):
        topological_order(Program(ops, [0]))


AMOUNTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**400),
    st.booleans(), st.floats(-1e3, 1e3).map(np.float64), st.integers(-5, 5).map(np.int64))


@settings(max_examples=500, deadline=None)
@given(size=AMOUNTS, times=st.lists(AMOUNTS, min_size=5, max_size=5))
def test_the_one_pass_check_accepts_only_what_the_field_checks_accept(size, times):
    op = Op(id=0, kind="compute", size=size, duration_ns=times[0], flops=times[1],
            mem_bytes=times[2], gap_ns=times[3], update_delay_ns=times[4])
    if _plain_amounts(op):
        _check_amounts(Program([op], [0]), op)   # raises if the fast path let a bad one by


def test_the_one_pass_check_takes_the_common_ops():
    """The fast path is the one taken for plain floats and ints (not only for nothing)."""
    assert _plain_amounts(Op(id=0, kind="compute", size=3, duration_ns=2.5, flops=1e12,
                             mem_bytes=7, gap_ns=0.0, update_delay_ns=1))
    for bad in (-1.0, math.nan, math.inf, True):
        op = Op(id=0, kind="compute", duration_ns=bad)
        assert not _plain_amounts(op)
        if bad is not True:
            with pytest.raises(ConfigError, match="duration_ns must be a non-negative number"):
                _check_amounts(Program([op], [0]), op)


def test_generated_ops_share_one_tuple_per_kernels_value():
    net = flowsim.load_network(TWO_NODES)
    w = transformer(net, layers=4, hidden=256, heads=8, sequence=128, micro_batch=2,
                    vocab=512, tp=4, pp=2, dp=2, global_batch=16, sp=True)
    for program in w.programs:   # one pipeline stage each
        computes = [op for op in program.ops if op.kind == "compute"]
        by_value: dict[tuple, int] = {}
        for op in computes:
            assert by_value.setdefault(op.kernels, id(op.kernels)) == id(op.kernels)
            assert op.flops == sum(k.flops for k in op.kernels)
            assert op.mem_bytes == sum(k.bytes for k in op.kernels)
        assert len(by_value) < len(computes) / 4   # micro-batches really share them


def test_the_collector_is_paused_during_a_run_and_restored_after(monkeypatch):
    import sys

    simulate_module = sys.modules["flowsim.system.simulate"]
    seen = []
    original = simulate_module.run_workload

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(simulate_module, "run_workload", spy)
    loop = spmd([Op(id=0, kind="compute", duration_ns=10.0),
                 Op(id=1, kind="collective", collective="all_reduce", size=1 << 20, deps=(0,))],
                8)
    assert gc.isenabled()
    flowsim.simulate("ring8", loop)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ConfigError):
        flowsim.simulate("ring8", loop, comm_scale=-1)
    assert gc.isenabled()
    flowsim.run_collective("ring8", "all_reduce", "1MiB")
    assert gc.isenabled()
    gc.disable()   # a caller's choice is kept
    try:
        flowsim.simulate("ring8", loop)
        assert not gc.isenabled()
    finally:
        gc.enable()
