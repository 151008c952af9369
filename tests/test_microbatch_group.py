"""The interleaved schedule's micro-batch group (``microbatch_group``, Megatron-Core's
``--microbatch-group-size-per-virtual-pipeline-stage``, from core 0.10): each model chunk runs
that many micro-batches in a row, the last group what is left, and the warm-up grows by
``(vpp - 1)`` groups. Checked against Megatron-Core's schedule table, by a run, and by its
bad specs."""

from __future__ import annotations

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.workload.generators.megatron import megatron_keys
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import stage_schedule

BASE = dict(layers=8, hidden=256, heads=4, sequence=512, vocab=0, pp=4, vpp=2, dp=1)


def _table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron-Core's ``get_schedule_table`` (core_r0.10), written out: (micro-batch, chunk)
    for every forward in order."""
    out = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        out += [(mb, chunk) for chunk in range(v) for mb in range(first, last)]
    return out


def test_megatron_cores_own_example_table():
    """Megatron-Core's comment in ``forward_backward_pipelining_with_interleaving``: PP 2,
    groups of 3, 5 micro-batches, VP 2: micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks
    0 0 0 1 1 1 0 0 1 1."""
    spec = parse_transformer(dict(BASE, pp=2, micro_batches=5, microbatch_group=3),
                             "argument")
    for stage in range(2):
        forwards = [(mb, chunk) for kind, chunk, mb in stage_schedule(spec, stage)
                    if kind == "fwd"]
        assert forwards == list(zip([0, 1, 2, 0, 1, 2, 3, 4, 3, 4],
                                    [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]))


@pytest.mark.parametrize("m, group", [(10, 6), (12, 12), (20, 8)])
def test_forwards_follow_megatron_cores_table_and_warm_up_by_groups(m, group):
    spec = parse_transformer(dict(BASE, micro_batches=m, microbatch_group=group), "argument")
    table = _table(m, 2, group)
    for stage in range(4):
        order = stage_schedule(spec, stage)
        forwards = [(mb, chunk) for kind, chunk, mb in order if kind == "fwd"]
        assert forwards == table
        backwards = [(mb, chunk) for kind, chunk, mb in order if kind == "bwd"]
        assert backwards == [(mb, 1 - chunk) for mb, chunk in table]
        # the warm-up forwards, then one more forward before the first backward
        warmup = min((4 - stage - 1) * 2 + group, 2 * m)
        first_backward = next(i for i, u in enumerate(order) if u[0] == "bwd")
        assert first_backward == min(warmup + 1, 2 * m)


def test_a_batch_no_multiple_of_pp_runs_with_a_group_that_fits_it():
    net = {"topology": ["Switch"], "npus_count": [4], "bandwidth": [100], "latency": [500]}
    spec = {"generator": "transformer", **BASE, "micro_batches": 10}
    with pytest.raises(flowsim.ConfigError, match="'micro_batches': expected a multiple of pp=4"):
        flowsim.simulate(net, spec, "nccl")
    runs = [flowsim.simulate(net, {**spec, "microbatch_group": g}, "nccl") for g in (5, 10)]
    # the same passes in another order: the same compute on every stage, and a step
    # at least as long as its busiest stage's compute
    assert runs[0]["compute_ns"].values.tolist() == pytest.approx(
        runs[1]["compute_ns"].values.tolist(), rel=1e-12)
    for ds in runs:
        assert float(ds.time_ns) >= float(ds["compute_ns"].max())


@pytest.mark.parametrize("extra, key", [
    ({"micro_batches": 8, "microbatch_group": 3}, "microbatch_group"),    # under pp
    ({"micro_batches": 8, "microbatch_group": 9}, "microbatch_group"),    # over the batch
    ({"micro_batches": 10, "microbatch_group": 8}, "micro_batches"),      # 2 left, under pp
    ({"micro_batches": 8, "microbatch_group": 4, "vpp": 1, "schedule": "1f1b"},
     "microbatch_group"),
])
def test_bad_groups_name_the_key(extra, key):
    assert_spec_refused(dict(BASE, **extra), key)


def test_megatrons_flag_names_the_group():
    keys = megatron_keys(("--num-layers 8 --hidden-size 256 --num-attention-heads 4 "
                          "--seq-length 512 --micro-batch-size 1 --global-batch-size 10 "
                          "--pipeline-model-parallel-size 4 "
                          "--num-virtual-stages-per-pipeline-rank 2 --bf16 "
                          "--microbatch-group-size-per-virtual-pipeline-stage 5").split(), "x")
    assert keys["microbatch_group"] == 5


def test_fewer_micro_batches_than_stages_name_the_batch():
    assert_spec_refused(dict(BASE, micro_batches=2, microbatch_group=4), "micro_batches")


def test_megatrons_group_flag_without_virtual_stages_is_ignored_as_megatron_does():
    keys = megatron_keys(("--num-layers 8 --hidden-size 256 --num-attention-heads 4 "
                          "--seq-length 512 --micro-batch-size 1 --global-batch-size 8 "
                          "--pipeline-model-parallel-size 4 --bf16 "
                          "--microbatch-group-size-per-virtual-pipeline-stage 5").split(), "x")
    assert "microbatch_group" not in keys
