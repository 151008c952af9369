"""Admission visits only the dimension queues that changed since the last admission: a queue
nobody enqueued into or freed a slot of is empty or full, as the last admission left it. The
runs come out bit-identical to admission visiting every queue that holds waiting chunks (the
scheduler's earlier rule, the reference here)."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.system.scheduler import Schedule

SYSTEM = {"preferred-dataset-splits": 4, "scheduling-policy": "FIFO",
          "active-chunks-per-dimension": 2, "endpoint-delay": 10}


_ADMIT = Schedule._admit


def _admit_every_queue(self: Schedule, now: float) -> None:
    """The reference: every queue holding waiting chunks visited, oldest queue first (the
    same admission with every such queue marked as changed)."""
    self._changed.update(self._nonempty)
    _ADMIT(self, now)


def _runs():
    """Training loops whose collectives contend for the queues (data-parallel reductions over
    tensor- and pipeline-parallel traffic), and a contended collective, on both models."""
    spec = dict(generator="transformer", layers=8, hidden=1024, heads=16, kv_heads=4,
                ffn=3584, vocab=32000, sequence=1024, global_batch=64, micro_batch=1, tp=2,
                pp=2, vpp=2, dp=4, sp=True, distributed_optimizer=True, gated_mlp=True,
                overlap_grad_reduce=True, overlap_param_gather=True, bucket_size=2_000_000,
                device="h100")
    net = {"topology": ["Switch", "Switch"], "npus_count": [4, 4], "bandwidth": [300, 50],
           "latency": [500, 2000]}
    for model in ("analytical", "flow"):
        yield f"transformer {model}", lambda m=model: flowsim.simulate(net, spec, SYSTEM,
                                                                       model=m)
        yield f"gpt3_3d {model}", lambda m=model: flowsim.simulate("gpt_1024", "gpt3_3d",
                                                                   model=m)
        yield f"all-to-all {model}", lambda m=model: flowsim.simulate_collective(
            "r4_fc8_sw4", "all_to_all", "64MiB", SYSTEM, model=m)


@pytest.mark.filterwarnings("ignore::flowsim.FlowsimWarning")   # one algorithm for all dims
@pytest.mark.parametrize("name, run", list(_runs()), ids=[n for n, _ in _runs()])
def test_admission_of_changed_queues_is_exact(name, run, monkeypatch):
    changed = run()
    monkeypatch.setattr(Schedule, "_admit", _admit_every_queue)
    every = run()
    for ds in (changed, every):
        ds.attrs.pop("wall_time_s", None)
    assert changed.identical(every), name
