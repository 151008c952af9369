"""Fully sharded data parallelism (``fsdp``): the per-layer parameter all-gathers and gradient
reduce-scatters of ZeRO-3 as PyTorch FSDP2 runs it, checked by closed forms (bytes per
rank), the order of gathers and frees, and timing bounds against Megatron's DDP."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.graph import topological_order

#: 2 nodes of 8 GPUs: TP 4 inside a node, DP 4 over both dims
TWO_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
             "latency": [500, 2000]}
H, FFN, TP, DP = 256, 1024, 4, 4
SMALL = dict(layers=4, hidden=H, ffn=FFN, heads=8, sequence=128, micro_batch=2, vocab=0,
             tp=TP, dp=DP, sp=True)
#: one layer's weights on one TP rank: QKV and projection (4 h^2 / t), FC1 and FC2
#: (2 h ffn / t), two norms (h each, replicated)
LAYER_PARAMS = 4 * H * H // TP + 2 * H * FFN // TP + 2 * H


@pytest.fixture(scope="module")
def two_nodes():
    return flowsim.load_network(TWO_NODES)


def _dp_collectives(program):
    """The data-parallel collectives (not on the TP dim 0), in program order."""
    return [op for op in program.ops if op.kind == "collective" and op.dims != (0,)]


def test_each_layer_is_gathered_before_its_forward_and_backward_and_reduced_after(two_nodes):
    """pp = 1, m micro-batches: per layer and micro-batch, a 16-bit all-gather of the rank's
    1/dp shard before the forward and again before the backward, and a reduce-scatter of
    the FP32 gradients (Megatron's default with BF16) after the backward."""
    m = 3
    w = transformer(two_nodes, **SMALL, global_batch=2 * DP * m, fsdp=True)
    (program,) = w.programs
    count = Counter((op.collective, op.pass_, op.size) for op in _dp_collectives(program))
    gather = 2 * LAYER_PARAMS // DP
    assert count == {("all_gather", "fwd", gather): 4 * m,
                     ("all_gather", "ig", gather): 4 * m,
                     ("reduce_scatter", "wg", 4 * LAYER_PARAMS): 4 * m}
    assert len(topological_order(program)) == len(program.ops)


def test_ddp_moves_less_than_fsdp_and_both_step_on_the_shard(two_nodes):
    """ZeRO-1 (the distributed optimizer) gathers and reduces once per iteration; FSDP per
    micro-batch, twice the gathers. Both update only the rank's 1/dp shard."""
    m = 2
    common = dict(SMALL, global_batch=2 * DP * m)
    zero1 = transformer(two_nodes, **common, distributed_optimizer=True,
                        overlap_grad_reduce=True, overlap_param_gather=True).programs[0]
    fsdp = transformer(two_nodes, **common, fsdp=True).programs[0]

    def dp_bytes(program, kind):
        return sum(op.size for op in _dp_collectives(program) if op.collective == kind)

    assert dp_bytes(zero1, "all_gather") == 2 * 4 * LAYER_PARAMS // DP
    assert dp_bytes(fsdp, "all_gather") == 2 * m * dp_bytes(zero1, "all_gather")
    assert dp_bytes(fsdp, "reduce_scatter") == m * dp_bytes(zero1, "reduce_scatter")
    step = [op for op in zero1.ops if op.name == "optimizer"]
    assert [op.mem_bytes for op in fsdp.ops if op.name == "optimizer"] == \
        [step[0].mem_bytes]


def _unit_events(program):
    """Per layer, the sequence of 'G' (all-gather) and 'R' (reduce-scatter) in op order."""
    events = defaultdict(str)
    for op in _dp_collectives(program):
        events[op.layer] += "G" if op.collective == "all_gather" else "R"
    return events


@pytest.mark.parametrize("pp", [1, 2])
def test_parameters_are_gathered_only_after_they_were_freed(two_nodes, pp):
    """Each layer's parameters are gathered, used, and freed after its backward's
    reduce-scatter: never gathered twice without a free between. Without pipelining each
    forward and each backward gathers and each backward reduces (FSDP2's defaults); with it
    torchtitan's pipeline stages keep every layer gathered and its gradients unsharded from
    its first forward to its last backward: one gather and one reduce-scatter per
    iteration, on every stage."""
    m = 4
    w = transformer(two_nodes, **dict(SMALL, dp=DP // pp), pp=pp,
                    global_batch=2 * (DP // pp) * m, fsdp=True)
    for program in w.programs:
        events = _unit_events(program)
        assert len(events) == 4 // pp   # the stage's layers
        for seq in events.values():
            assert "GG" not in seq.replace("GR", "R")  # a gather is used before the next one
            assert seq == ("GGR" * m if pp == 1 else "GR")
        if pp == 2:   # the one gather is the first forward's, the reduction the last's
            gathers = [op for op in _dp_collectives(program) if op.collective == "all_gather"]
            assert {op.pass_ for op in gathers} == {"fwd"}
            assert all(op.name.startswith("mb0.") for op in gathers)
            reductions = [op for op in _dp_collectives(program)
                          if op.collective == "reduce_scatter"]
            assert all(op.name.startswith(f"mb{m - 1}.") for op in reductions)


def test_the_output_layer_and_the_embedding_are_units_too(two_nodes):
    """With a vocabulary, the embedding (and the output layer, one tied weight on one
    stage) is gathered and reduced like a layer, its rank's vocabulary shard; being needed
    again by the output layer, then by the backward, it stays gathered from the embedding's
    forward to the embedding's backward: one gather and one reduction per micro-batch."""
    w = transformer(two_nodes, **dict(SMALL, vocab=1000), global_batch=2 * DP, fsdp=True)
    (program,) = w.programs
    vocab_rows = {w.layers.index("embedding"), w.layers.index("logits")}
    ops = [op for op in _dp_collectives(program) if op.layer in vocab_rows]
    padded = -(-1000 // (128 * TP)) * 128 * TP
    shard = padded // TP * H
    assert Counter((op.collective, op.size) for op in ops) == {
        ("all_gather", 2 * shard // DP): 1, ("reduce_scatter", 4 * shard): 1}


def test_fsdp_costs_time_on_a_slow_network_and_hides_on_a_fast_one():
    """Pure data parallelism over 16 GPUs. On a 1,000x faster network Megatron-FSDP's
    iteration is within 5% of ZeRO-1's (its collectives hide behind the compute they are prefetched
    beside; what is left is the fixed cost of its 3 collectives per layer and micro-batch);
    on a slow one it pays for its extra gathers: slower than ZeRO-1, but faster than doing
    its compute and all its collectives one after another."""
    def run(bandwidth, **keys):
        net = flowsim.load_network(dict(TWO_NODES, bandwidth=[bandwidth, bandwidth]))
        # 1,024 tokens: enough compute that the collectives' fixed costs (NCCL's rings: 15
        # hand-offs each) stay small beside it
        spec = dict(generator="transformer", **dict(SMALL, hidden=1024, ffn=4096, tp=1,
                                                     dp=16, sp=False, sequence=1024),
                    global_batch=2 * 16 * 2, device="h100", **keys)
        return flowsim.run_training(net, spec, "nccl").record

    zero1 = dict(distributed_optimizer=True, overlap_grad_reduce=True,
                 overlap_param_gather=True)
    # Megatron-FSDP's (no copies around the collectives: what is left is the collectives)
    fsdp = dict(fsdp=True, fsdp_impl="megatron")
    fast_zero1, fast = run(25_000, **zero1), run(25_000, **fsdp)
    assert fast.time_ns == pytest.approx(fast_zero1.time_ns, rel=0.05)
    # PyTorch FSDP2's copies out of and into the collectives' buffers are compute: they stay
    assert run(25_000, fsdp=True).time_ns > fast.time_ns * 1.05
    slow_zero1, slow = run(2, **zero1), run(2, **fsdp)
    assert slow.time_ns > slow_zero1.time_ns
    for record in (fast, slow):
        assert record.time_ns < record.npu_compute_ns.max() + record.dim_busy_ns.sum()


def test_bad_fsdp_values_name_the_key(two_nodes):
    with pytest.raises(ConfigError, match="fsdp"):
        transformer(two_nodes, **SMALL, global_batch=2 * DP, fsdp="sometimes")


def test_hybrid_sharding_shards_inside_a_group_and_all_reduces_over_its_replicas():
    """``fsdp_shard: 8`` on 2 nodes of 8 GPUs with dp 16 (HSDP): a unit's parameters are
    gathered and its gradients reduce-scattered over the 8 GPUs of a node (dim 0), and each
    gradient shard, 1/8 of the unit, all-reduced over the 2 replicas (dim 1); the
    optimizer steps on a 1/8 shard."""
    net = flowsim.load_network(dict(TWO_NODES, bandwidth=[300, 25]))
    keys = dict(SMALL, hidden=H, tp=1, dp=16, sp=False, global_batch=2 * 16)
    layer = 4 * H * H + 2 * H * FFN + 2 * H
    w = transformer(net, **keys, fsdp=True, fsdp_shard=8)
    (program,) = w.programs
    count = Counter((op.collective, op.dims, op.size) for op in program.ops
                    if op.kind == "collective")
    assert count == {("all_gather", (0,), 2 * layer // 8): 2 * 4,
                     ("reduce_scatter", (0,), 4 * layer): 4,
                     ("all_reduce", (1,), 4 * layer // 8): 4}
    assert w.memory["optimizer"] == pytest.approx(12 * 4 * layer / 8)
    full = transformer(net, **keys, fsdp=True)
    assert full.memory["optimizer"] == pytest.approx(12 * 4 * layer / 16)


@pytest.mark.parametrize("keys, expected", [
    (dict(fsdp_shard=2), "unset without fsdp"),
    (dict(fsdp=True, fsdp_shard=3), "groups divide dp=4"),
    (dict(fsdp=True, fsdp_shard=8), "groups divide dp=4")])
def test_bad_sharding_groups_name_the_key(two_nodes, keys, expected):
    with pytest.raises(ConfigError, match=f"fsdp_shard.*{expected}"):
        transformer(two_nodes, **SMALL, global_batch=2 * DP, **keys)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(pp=st.sampled_from([1, 2, 4]), vpp=st.sampled_from([1, 2]), m=st.integers(1, 4),
       vocab=st.sampled_from([0, 1000]), tied=st.booleans(), shard=st.sampled_from([1, 2, 4]))
def test_any_fsdp_layout_gathers_before_use_and_reduces_once_per_free(pp, vpp, m, vocab,
                                                                      tied, shard):
    """Random pipelines, micro-batches, vocabularies and sharding groups: every unit's
    all-gathers and reduce-scatters alternate (a gather, then uses, then one reduction
    that frees it), every unit is reduced once per micro-batch without pipelining and once
    per iteration with it, the op graph is a DAG, and the run finishes."""
    vpp = vpp if pp > 1 else 1
    m = m * pp if vpp > 1 else m            # the interleaved schedule needs pp | m
    dp = 16 // pp
    shard = min(shard, dp)
    net = flowsim.load_network(dict(TWO_NODES, npus_count=[8, 2]))
    w = transformer(net, **dict(SMALL, vocab=vocab, layers=2 * pp * vpp, tp=1, dp=dp,
                                sp=False), pp=pp, vpp=vpp, micro_batches=m,
                    tied_embeddings=tied, fsdp=True, fsdp_shard=shard)
    for program in w.programs:
        assert len(topological_order(program)) == len(program.ops)
        events = defaultdict(str)
        for op in program.ops:
            if op.kind == "collective" and op.name.endswith(("params.all_gather",
                                                             "grads.reduce_scatter")):
                unit = next(part for part in op.name.split(".")
                            if part.startswith("layer") or part in ("embedding", "logits"))
                events[unit] += "G" if op.collective == "all_gather" else "R"
        for unit, seq in events.items():
            assert seq.startswith("G") and "GG" not in seq.replace("GR", "|"), (unit, seq)
            assert seq.count("R") == (m if pp == 1 else 1), (unit, seq)
    run = flowsim.run_training(net, dict(generator="transformer", **dict(
        SMALL, vocab=vocab, layers=2 * pp * vpp, tp=1, dp=dp, sp=False), pp=pp, vpp=vpp,
        micro_batches=m, tied_embeddings=tied, fsdp=True, fsdp_shard=shard,
        device="h100"), "nccl")
    assert run.record.time_ns > 0


@pytest.mark.parametrize(("reshard", "defer", "gathers", "reductions"), [
    ("after_forward", False, {"fwd": 3, "ig": 3}, 3),   # FSDP2's default (above)
    ("after_forward", True, {"fwd": 3, "ig": 3}, 1),
    ("after_backward", False, {"fwd": 3}, 3),
    ("after_step", True, {"fwd": 1}, 1),               # NeMo AutoModel's FSDP optimizations
])
def test_gradient_accumulation_defers_what_the_settings_say(two_nodes, reshard, defer, gathers,
                                                            reductions):
    """Per layer over m = 3 micro-batches: ``fsdp_reshard`` keeps the gathered parameters
    from the forward to the backward (``after_backward``) or across micro-batches
    (``after_step``); ``fsdp_defer_grad_sync`` reduces the accumulated gradients once, the
    bytes of one micro-batch's."""
    m = 3
    w = transformer(two_nodes, **SMALL, global_batch=2 * DP * m, fsdp=True,
                    fsdp_reshard=reshard, fsdp_defer_grad_sync=defer)
    (program,) = w.programs
    count = Counter((op.collective, op.pass_) for op in _dp_collectives(program))
    assert count == {**{("all_gather", p): 4 * n for p, n in gathers.items()},
                     ("reduce_scatter", "wg"): 4 * reductions}
    assert all(op.size == 4 * LAYER_PARAMS for op in _dp_collectives(program)
               if op.collective == "reduce_scatter")
    assert len(topological_order(program)) == len(program.ops)


def test_what_stays_gathered_is_held_in_memory(two_nodes):
    """Kept gathered across micro-batches, every unit's weights are whole at the peak; with
    the reduction deferred, every unit's gradients accumulate whole."""
    common = dict(SMALL, global_batch=2 * DP * 3, fsdp=True)
    base = transformer(two_nodes, **common).memory
    kept = transformer(two_nodes, **common, fsdp_reshard="after_step").memory
    deferred = transformer(two_nodes, **common, fsdp_defer_grad_sync=True).memory
    assert kept["weights"] == pytest.approx(2 * 4 * LAYER_PARAMS)   # 16-bit, every layer
    assert kept["gradients"] == base["gradients"] < deferred["gradients"]
    assert deferred["gradients"] == pytest.approx(4 * 4 * LAYER_PARAMS)
    assert deferred["weights"] == base["weights"] < kept["weights"]


@pytest.mark.parametrize(("change", "key"), [
    (dict(fsdp_defer_grad_sync=True), "fsdp_defer_grad_sync"),
    (dict(fsdp=True, pp=2, dp=2, fsdp_reshard="after_step"), "fsdp_reshard"),
    (dict(fsdp=True, fsdp_reshard="never"), "fsdp_reshard"),
])
def test_bad_accumulation_settings_name_their_key(two_nodes, change, key):
    with pytest.raises(ConfigError, match=f"'{key}': expected"):
        transformer(two_nodes, **{**SMALL, "global_batch": 8, **change})
