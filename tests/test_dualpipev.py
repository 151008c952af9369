"""DualPipeV (``schedule: dualpipev``): DeepSeek's V-shape schedule, rank ``r`` holding virtual
stages ``r`` and ``2p - 1 - r``, forwards run beside backwards. Checked by its passes, by the
bubble its README publishes, by its placement and messages, by the activations it holds, and
by the specs it refuses."""

from __future__ import annotations

from collections import Counter

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_combined import paired_forwards
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import (
    dualpipev,
    neighbours,
    stage_schedule,
    virtual_stage,
)

P, M = 4, 32
ROOFLINE = {"peak_tflops": 100, "memory_bandwidth_GBps": 1000, "efficiency": 1.0}
BASE = dict(layers=16, hidden=1024, heads=8, sequence=2048, micro_batch=1, pp=P,
            global_batch=M, gated_mlp=True, roofline=ROOFLINE)
V = dict(BASE, vpp=2, schedule="dualpipev")
#: four ranks on links fast enough that the pipeline's messages take no time to speak of
FAST = {"topology": ["Switch"], "npus_count": [P], "bandwidth": [1e6], "latency": [1]}


@pytest.mark.parametrize("m", [2 * P, 2 * P + 3, M])
def test_every_rank_runs_each_pass_once_in_micro_batch_order(m):
    spec = parse_transformer(dict(V, global_batch=m), "argument")
    for rank in range(P):
        order = stage_schedule(spec, rank)
        assert Counter(order) == Counter((kind, c, k) for kind in ("fwd", "bwd")
                                         for c in (0, 1) for k in range(m))
        for kind in ("fwd", "bwd"):
            for chunk in (0, 1):
                seen = [k for pass_, c, k in order if (pass_, c) == (kind, chunk)]
                assert seen == sorted(seen)
        for c in (0, 1):   # each micro-batch's forward before its backward
            for k in range(m):
                assert order.index(("fwd", c, k)) < order.index(("bwd", c, k))
        # pairs: a forward, then the backward beside it (every rank has some)
        assert paired_forwards(spec, rank)
        for i in paired_forwards(spec, rank):
            assert order[i][0] == "fwd" and order[i + 1][0] == "bwd"


def _step(spec: dict, p: int = P) -> tuple[float, float, float, float]:
    """The step's time and each rank's forward, input-gradient and weight-gradient compute
    (uniform ranks)."""
    fast = dict(FAST, npus_count=[p])
    ds = flowsim.simulate(fast, {"generator": "transformer", **spec}, "nccl", model="flow")
    per_npu = ds.layer_compute_ns.sum("layer") / p
    return (float(ds.time_ns), *(float(per_npu.sel({"pass": k})) for k in ("fwd", "ig", "wg")))


@pytest.mark.parametrize("p, m", [(2, 8), (P, 2 * P), (P, M), (8, 16)])
def test_the_step_takes_the_bubble_dualpipev_s_readme_gives(p, m):
    """With 2p stages of equal work (per chunk: F forward, B backward of which W the weight
    gradients), DualPipeV's README bubble (PP/2 - 1)(F&B + B - 3W) over PP = 2p stages, a
    forward beside a backward taking F + B on one compute stream (F&B), is
    (p - 1)(F + 2B - 3W): the step is 2m (F + B) plus it, give or take part of one W (the
    table counts whole chunks; measured: 0.5 to 0.85 W, at any m); without the deferred
    weight gradients it would be (p - 1)(F + 2B). 1F1B: (p - 1)(F + B) beside it
    (with m = 32)."""
    spec = dict(V, pp=p, global_batch=m)
    step, forward, input_grads, weight_grads = _step(spec, p)
    f, w = forward / (2 * m), weight_grads / (2 * m)
    b = input_grads / (2 * m) + w
    readme = 2 * m * (f + b) + (p - 1) * (f + 2 * b - 3 * w)
    assert readme <= step <= readme + w
    assert step < 2 * m * (f + b) + (p - 1) * (f + 2 * b) - (p - 1) * 2 * w
    if (p, m) == (P, M):
        step, forward, input_grads, weight_grads = _step(BASE)
        f, b = forward / M, (input_grads + weight_grads) / M
        assert step == pytest.approx((M + P - 1) * (f + b), rel=1e-2)


def test_the_first_rank_holds_both_ends_and_the_last_turns_without_a_message():
    spec = parse_transformer(dict(V, vocab=8192), "argument")
    assert [virtual_stage(spec, 0, c) for c in (0, 1)] == [0, 2 * P - 1]
    assert [virtual_stage(spec, P - 1, c) for c in (0, 1)] == [P - 1, P]
    assert neighbours(spec, P - 1, 0)[1] == (P - 1, 1)   # the V's turn: the same rank
    work = transformer(flowsim.load_network(FAST), **dict(V, vocab=8192))
    names = [op.name for op in work.programs[0].ops]
    assert any(n.endswith(".embedding") for n in names)
    assert any(".logits" in n for n in names)
    sends = [sum(op.kind == "send" for op in program.ops) for program in work.programs]
    assert sends == [2 * M, 4 * M, 4 * M, 2 * M]   # the ends and the turn send half


def test_a_rank_holds_at_most_pp_plus_one_stages_in_flight():
    """DualPipeV's README: activations of PP + 1 stages per device (PP = 2p stages); the
    passes in flight the memory estimate counts stay within it."""
    spec = parse_transformer(V, "argument")
    for rank in range(P):
        held, peak = 0, 0
        for pass_, _, _ in stage_schedule(spec, rank):
            held += 1 if pass_ == "fwd" else -1
            peak = max(peak, held)
        assert peak <= 2 * P + 1


def test_the_fullest_rank_keeps_pp_plus_one_stages_of_activations():
    """In bytes: a stage's activations are its two layers' (Korthikanti et al.'s terms, no
    tensor parallelism: Q, K, V and the output, the gated MLP's three inputs, block inputs,
    norms and masks), and the memory estimate's fullest rank keeps PP + 1 = 2p + 1 of them,
    as DualPipeV's README gives (the interleaved schedule's first rank keeps more)."""
    n, h = BASE["sequence"], BASE["hidden"]
    f = 4 * h
    stage = 2 * (2 * n * 4 * h + 2 * n * 3 * f + (4 * 2 + 2) * n * h)
    work = transformer(flowsim.load_network(FAST), **V)
    assert work.memory["activations"] == (2 * P + 1) * stage
    plain = transformer(flowsim.load_network(FAST), **dict(V, schedule="interleaved"))
    assert plain.memory["activations"] > work.memory["activations"]


@pytest.mark.parametrize("extra, key", [
    ({"vpp": 3}, "vpp"),
    ({"global_batch": 2 * P - 1}, "global_batch"),
])
def test_bad_dualpipev_specs_are_refused_naming_the_key(extra, key):
    assert_spec_refused(dict(V, **extra), key)


def test_combined_1f1b_is_refused_beside_dualpipev_s_own_pairs():
    from flowsim.errors import ConfigError

    with pytest.raises(ConfigError, match="'moe_a2a_overlap': expected false with schedule "
                                          "dualpipev"):
        parse_transformer(dict(V, moe_a2a_overlap=True, experts=4, dp=2, ep=2), "argument")


def _backward_ops(ops, m: int, chunk: int) -> list:
    """The ops of one backward (micro-batch ``m``, chunk ``chunk``), in stream order."""
    tag = f"mb{m}.chunk{chunk}."
    return [op for op in ops if op.name.startswith(tag) and op.pass_ in ("ig", "wg")]


def test_a_zero_bubble_backward_sends_its_gradient_before_its_weight_gradients():
    """DualPipeV's WeightGradStore: the backwards its schedule marks (steps 3, 6 and 7) put
    their weight gradients after the gradient they send, the others between their layers;
    every backward of a chunk computes the same weight gradients, held or not."""
    spec = parse_transformer(V, "argument")
    work = transformer(flowsim.load_network(FAST), **V)
    for rank, program in enumerate(work.programs):
        order, _, deferred, weights = dualpipev(spec, rank)
        assert deferred and sum(weights.values()) == len(deferred)
        names: dict[int, set[str]] = {0: set(), 1: set()}
        for i, (kind, chunk, m) in enumerate(order):
            if kind != "bwd":
                continue
            ops = _backward_ops(program.ops, m, chunk)
            kinds = [op.pass_ if op.kind == "compute" else op.kind for op in ops]
            wgrads = {op.name.split(".", 2)[2] for op in ops if op.pass_ == "wg"}
            assert wgrads and (names[chunk] or wgrads) == wgrads
            names[chunk] = wgrads
            if "send" not in kinds:   # the first rank's last stage: no gradient to send
                continue
            sent = kinds.index("send")
            assert ("wg" in kinds[:sent]) == (i not in deferred)


def test_gradient_buckets_wait_for_the_held_weight_gradients():
    """Reduced as each bucket is ready: every gradient reduction waits for weight-gradient
    ops of the chunk's last backward, held or not, and nothing is left in the queue."""
    spec = dict(V, dp=2, distributed_optimizer=True, overlap_grad_reduce=True)
    fast = dict(FAST, npus_count=[2 * P])
    work = transformer(flowsim.load_network(fast), **spec)
    for program in work.programs:
        ops = program.ops
        reductions = [op for op in ops if op.kind == "collective" and op.pass_ == "wg"
                      and op.collective == "reduce_scatter"]
        assert reductions
        for op in reductions:
            assert op.deps and all(ops[d].pass_ == "wg" and ops[d].kind == "compute"
                                   for d in op.deps)
            assert all(f"mb{M // 2 - 1}." in ops[d].name for d in op.deps)   # dp 2: M/2


def test_under_userbuffers_no_weight_gradient_is_held():
    """tp_comm_overlap overlaps weight gradients with the data gradients' collectives: every
    backward keeps them between its layers."""
    spec = dict(V, tp=2, sp=True, tp_comm_overlap=True)
    work = transformer(flowsim.load_network(dict(FAST, npus_count=[2 * P])), **spec)
    for program in work.programs[:1]:
        for m in range(M):
            kinds = [op.pass_ if op.kind == "compute" else op.kind
                     for op in _backward_ops(program.ops, m, 1)]
            assert "wg" in kinds[:kinds.index("send")]
