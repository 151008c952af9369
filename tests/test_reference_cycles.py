"""A run frees what it built by reference counting alone.

flowsim pauses Python's cyclic collector while it builds and runs a workload
(:mod:`flowsim._gc_pause`), and whatever a run leaves in reference cycles waits for a full
collection, which a loop of runs (a sweep, an optimizer calling flowsim as its estimator)
may not trigger for a long time: a cycle holding a run's ops kept gigabytes alive per run.
"""

from __future__ import annotations

import gc

import pytest

import flowsim
from flowsim.workload.generators.transformer import transformer

TWO_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
             "latency": [500, 2000]}
#: every helper the transformer's pass builder has: context parallelism, userbuffers
#: overlap, pipeline stages, the distributed optimizer
SPEC = dict(generator="transformer", layers=4, hidden=256, heads=8, sequence=256,
            micro_batch=1, global_batch=8, vocab=1024, tp=2, pp=2, cp=2, dp=2, sp=True,
            tp_comm_overlap=True, distributed_optimizer=True, device="h100")


def _left_in_cycles(run) -> int:
    """Objects only a cyclic collection frees after ``run``, measured the second time (the
    first fills the process's caches, once)."""
    run()
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        run()
        return gc.collect()
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize("variant", [
    {},
    {"fsdp": True, "distributed_optimizer": False, "tp_comm_overlap": False},
    {"experts": 4, "top_k": 2, "ep": 2},
], ids=["cp-overlap-pp", "fsdp", "experts"])
def test_building_a_transformer_leaves_its_ops_to_reference_counting(variant):
    network = flowsim.load_network(TWO_NODES)
    keys = {k: v for k, v in {**SPEC, **variant}.items() if k != "generator"}
    ops = sum(len(p.ops) for p in transformer(network, **keys).programs)
    assert ops > 500   # enough that a cycle holding them would show
    cycles = _left_in_cycles(lambda: transformer(network, **keys))
    assert cycles == 0, f"{cycles} objects of a {ops}-op workload were left in cycles"


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_a_simulation_leaves_its_ops_to_reference_counting(model):
    cycles = _left_in_cycles(lambda: flowsim.simulate(TWO_NODES, SPEC, "nccl", model=model))
    assert cycles == 0, f"{cycles} objects were left in cycles by one run"


def test_a_weak_callback_passes_keywords_and_says_when_its_object_is_gone():
    from flowsim._weak import weak_method

    class Owner:
        def add(self, a, *, b=0):
            return a + b

    owner = Owner()
    call = weak_method(owner.add)
    assert call(1, b=2) == 3
    del owner
    with pytest.raises(ReferenceError, match="Owner.add"):
        call(1)
