"""The transformer generator: Megatron-LM's layer, communication and schedules, checked by
closed forms (bytes and FLOPs per rank), invariants of the schedules, the mapping onto the
network, hand-timed runs, and bad specs."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

import flowsim
from conftest import ancestors
from flowsim import simulate
from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.workload.generators import build_generator, transformer
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import layer_counts, stage_schedule
from flowsim.workload.graph import topological_order
from flowsim.workload.kernels import Attention, Elementwise, Gemm

#: 2 nodes of 8 GPUs
TWO_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
             "latency": [500, 2000]}
SMALL = dict(layers=4, hidden=256, heads=8, sequence=128, micro_batch=2, vocab=0)


@pytest.fixture(scope="module")
def two_nodes():
    return flowsim.load_network(TWO_NODES)


def _ops(program, kind, collective=None, name=None):
    return [op for op in program.ops if op.kind == kind
            and (collective is None or op.collective == collective)
            and (name is None or name in op.name)]


def _check_graph(workload):
    """Every program is a DAG whose compute ops form one chain, in list order."""
    for program in workload.programs:
        assert len(topological_order(program)) == len(program.ops)
        computes = _ops(program, "compute")
        for prev, op in zip(computes, computes[1:]):
            assert op.ctrl_deps == (prev.id,)
        for op in program.ops:
            assert 0 <= op.layer < len(workload.layers)


# ------------------------------------------------------------------ communication bytes
@pytest.mark.parametrize("sp", [False, True])
def test_tensor_parallel_collectives_per_layer(two_nodes, sp):
    """Per layer and micro-batch: 2 all-reduces of b s h 2 bytes forward and 2 backward, or
    with sequence parallelism 2 all-gathers of b s h 2 / t and 2 reduce-scatters of b s h 2
    each way (Korthikanti et al. 2022, fig. 5), and in backward 2 more all-gathers: each
    column-parallel layer's input, kept sharded, gathered again for its weight gradient
    (Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication``)."""
    t, m = 4, 3
    w = transformer(two_nodes, **SMALL, tp=t, dp=4, global_batch=2 * 4 * m, sp=sp)
    (program,) = w.programs
    act = 2 * 128 * 256 * 2
    tp_ops = [op for op in program.ops if op.kind == "collective" and op.dims == (0,)]
    count = Counter((op.collective, op.pass_, op.size) for op in tp_ops)
    if sp:
        assert count == {("all_gather", "fwd", act // t): 2 * 4 * m,
                         ("reduce_scatter", "fwd", act): 2 * 4 * m,
                         ("all_gather", "ig", act // t): 2 * 2 * 4 * m,
                         ("reduce_scatter", "ig", act): 2 * 4 * m}
    else:
        assert count == {("all_reduce", "fwd", act): 2 * 4 * m,
                         ("all_reduce", "ig", act): 2 * 4 * m}
    _check_graph(w)


def test_full_recomputation_repeats_the_forward_with_its_collectives(two_nodes):
    base = transformer(two_nodes, **SMALL, tp=4, dp=4, global_batch=8, sp=True)
    full = transformer(two_nodes, **SMALL, tp=4, dp=4, global_batch=8, sp=True,
                       recompute="full")
    for kind in ("all_gather", "reduce_scatter"):
        fwd = len([o for o in _ops(base.programs[0], "collective", kind) if o.pass_ == "fwd"])
        again = len([o for o in _ops(full.programs[0], "collective", kind)
                     if o.pass_ == "fwd"])
        assert again == 2 * fwd
    gemm = Counter(type(k) for op in _ops(full.programs[0], "compute") for k in op.kernels)
    plain = Counter(type(k) for op in _ops(base.programs[0], "compute") for k in op.kernels)
    # the 4 forward GEMMs of each of the 4 layers once more (1 micro-batch)
    assert gemm[Gemm] - plain[Gemm] == 4 * 4


def test_data_parallel_gradients_and_the_distributed_optimizer(two_nodes):
    """All parameter gradients are reduced over the DP group once per iteration (FP32 with
    BF16 training); the distributed optimizer reduce-scatters them and all-gathers the 16-bit
    parameters (Megatron-LM's ZeRO-1)."""
    h, t, dp = 256, 2, 8
    per_layer = h * 3 * h // t + h * h // t + 2 * h * 4 * h // t + 2 * h
    plain = transformer(two_nodes, **SMALL, tp=t, dp=dp, global_batch=2 * dp)
    grads = _ops(plain.programs[0], "collective", "all_reduce", "grads")
    assert sum(op.size for op in grads) == 4 * 4 * per_layer
    assert {op.dims for op in grads} == {(1, 2)}          # dp = pieces 1 and 2 of the view
    sharded = transformer(two_nodes, **SMALL, tp=t, dp=dp, global_batch=2 * dp,
                          distributed_optimizer=True, overlap_grad_reduce=True,
                          overlap_param_gather=True, bucket_size=per_layer)
    rs = _ops(sharded.programs[0], "collective", "reduce_scatter", "grads")
    ag = _ops(sharded.programs[0], "collective", "all_gather", "params")
    assert len(rs) == 4 and sum(op.size for op in rs) == 4 * 4 * per_layer
    assert sum(op.size for op in ag) == 2 * 4 * per_layer // dp
    # overlapped: a bucket's reduction waits for its own layer's last weight gradient only
    by_id = {op.id: op for op in sharded.programs[0].ops}
    assert [by_id[op.deps[0]].layer for op in rs] == [3, 2, 1, 0]


@pytest.mark.parametrize("pp", [1, 2])
def test_a_tied_embedding_on_one_stage_is_one_weight(two_nodes, pp):
    """On one pipeline stage a tied embedding and output layer are one weight: one gradient
    reduced, one parameter gathered; on two stages each holds its own copy, as untied."""
    v, h, t, dp = 1024, 256, 2, 8 // pp
    spec = dict(SMALL, vocab=v, tp=t, pp=pp, dp=dp, global_batch=4 * dp,
                distributed_optimizer=True)

    def sizes(tied):
        w = transformer(two_nodes, **spec, tied_embeddings=tied)
        return [sum(op.size for p in w.programs for op in _ops(p, "collective", kind, name))
                for kind, name in (("reduce_scatter", "grads"), ("all_gather", "params"))]
    (rs_tied, ag_tied), (rs_untied, ag_untied) = sizes(True), sizes(False)
    vocab = -(-v // (128 * t)) * 128 * t // t * h    # the padded shard's weights
    shared = pp == 1
    assert rs_untied - rs_tied == (4 * vocab if shared else 0)   # FP32 gradients
    assert ag_untied - ag_tied == (2 * vocab // dp if shared else 0)


def test_fp8_parameters_are_gathered_in_one_byte(two_nodes):
    """``fp8_param_gather``: the layers' weights all-gathered in FP8, the vocabulary's in 16
    bits; refused without FP8 training."""
    spec = dict(SMALL, vocab=1024, tp=2, dp=8, global_batch=16, dtype="fp8",
                distributed_optimizer=True)

    def gathered(**kw):
        w = transformer(two_nodes, **spec, **kw)
        return sum(op.size for op in _ops(w.programs[0], "collective", "all_gather", "params"))
    h, t = 256, 2
    per_layer = h * 3 * h // t + h * h // t + 2 * h * 4 * h // t + 2 * h
    assert gathered() - gathered(fp8_param_gather=True) == 4 * per_layer // 8
    with pytest.raises(ConfigError, match=r"'fp8_param_gather': expected false without "
                                          r"dtype: fp8"):
        transformer(two_nodes, **dict(spec, dtype="bf16"), fp8_param_gather=True)


def test_context_parallel_exchanges_keys_and_values(two_nodes):
    """CP 2, ``cp_comm_type: all_gather`` (Llama 3's): keys and values all-gathered per layer
    forward (2 b (s / cp) kv 2 bytes from each rank), their gradients reduce-scattered
    backward; the attention split into the local causal step and the remote one; gradients
    reduced over DP x CP."""
    w = transformer(two_nodes, **SMALL, tp=2, cp=2, dp=4, global_batch=8, kv_heads=4,
                    sp=True, cp_comm_type="all_gather")
    program = w.programs[0]
    per_rank = 2 * 2 * (128 // 2) * (4 // 2) * 32 * 2
    layers = range(4)
    kv = [op for op in program.ops if op.name.endswith(".kv.all_gather")]
    assert {op.size for op in kv} == {per_rank}   # one micro-batch: a gather per layer
    assert {op.name for op in kv} == {f"mb0.layer{i}.kv.all_gather" for i in layers}
    rs = [op for op in program.ops if op.name.endswith(".kv.reduce_scatter")]
    assert len(rs) == 4 and {(op.collective, op.size) for op in rs} == \
        {("reduce_scatter", 2 * per_rank)}
    attention = [k for op in _ops(program, "compute") for k in op.kernels
                 if isinstance(k, Attention) and not k.backward]
    assert Counter((k.seq_q, k.seq_kv, k.causal) for k in attention) == \
        {(64, 64, True): 4, (64, 32, False): 4}
    grads = _ops(program, "collective", "all_reduce", "grads")
    (dims,) = {op.dims for op in grads}
    assert int(np.prod([w.network.dims[d] for d in dims])) == 4 * 2      # dp x cp


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_passes_keys_and_values_around_a_ring(two_nodes, cp):
    """``cp_comm_type: p2p`` (Transformer Engine's ring, Megatron-Core's default), as
    ``AttnFuncWithCPAndKVP2P`` schedules it. Forward: the local causal block, then cp - 1
    steps, step i attending the block exchange i brought; exchange i + 1 passes that block
    on, waiting for exchange i only. Backward: at step j one message goes on, waiting for the
    previous step's exchange and attention: the keys and values at j = 0, the keys and
    values with the gradients accumulated so far in the middle (two blocks), the gradients
    alone at the last step; step j attends after the previous step's exchange; the QKV data
    gradient waits for the last. A block is the rank's keys and values, 2 b (s / cp) kv 2
    bytes; an exchange of m blocks is an all-to-all of m blocks x cp / (cp - 1) over CP."""
    w = transformer(two_nodes, **SMALL, tp=2, cp=cp, dp=8 // cp, global_batch=16 // cp,
                    kv_heads=4, sp=True)
    program = w.programs[0]
    by_name = {op.name: op for op in program.ops}
    by_id = {op.id: op for op in program.ops}
    block = 2 * 2 * (128 // cp) * (4 // 2) * 32 * 2

    def size(blocks):
        return round(blocks * block * cp / (cp - 1))

    def waits(op):   # data and stream dependencies, by name
        return {by_id[d].name for d in (*op.deps, *op.ctrl_deps)}

    assert not [op for op in program.ops if op.name.endswith((".kv.all_gather",
                                                              ".kv.reduce_scatter"))]
    for layer in range(4):   # one micro-batch: global batch 16 / cp over 2 x 8 / cp ranks
        name = f"mb0.layer{layer}"
        fwd = [op for op in program.ops if op.pass_ == "fwd" and op.kind == "collective"
               and op.name.startswith(f"{name}.kv.ring")]
        assert [(op.name, op.collective, op.size) for op in fwd] == \
            [(f"{name}.kv.ring{i}", "all_to_all", size(1)) for i in range(1, cp)]
        for i in range(2, cp):
            assert waits(fwd[i - 1]) == {f"{name}.kv.ring{i - 1}"}
        steps = [by_name[f"{name}.attention_ring{i}"] for i in range(1, cp - 1)]
        steps.append(by_name[f"{name}.attention_remote"])   # the last block, in the projection's op
        for i, op in enumerate(steps, start=1):
            assert f"{name}.kv.ring{i}" in waits(op)
            assert sum(isinstance(k, Attention) for k in op.kernels) == 1
        bwd = [op for op in program.ops if op.pass_ == "ig" and op.kind == "collective"
               and ".ring" in op.name and op.name.startswith(name + ".")]
        assert [(op.name, op.size) for op in bwd] == \
            [(f"{name}.kv.ring1", size(1))] + \
            [(f"{name}.kv_grad.ring{j}", size(1 if j == cp - 1 else 2)) for j in range(1, cp)]
        local = [op for op in program.ops if op.pass_ == "ig" and op.name.startswith(name)
                 and any(isinstance(k, Attention) and k.causal for k in op.kernels)]
        assert len(local) == 1
        backward_steps = [local[0]] + [by_name[f"{name}.attention_ring{j}.dgrad"]
                                       for j in range(1, cp)]
        for j in range(1, cp):
            assert {bwd[j - 1].name, backward_steps[j - 1].name} <= waits(bwd[j])
            assert bwd[j - 1].name in waits(backward_steps[j])
        qkv = by_name[f"{name}.attention.dgrad.qkv"]
        assert bwd[-1].name in waits(qkv) | {n for d in qkv.deps for n in waits(by_id[d])}
    attention = [k for op in _ops(program, "compute") for k in op.kernels
                 if isinstance(k, Attention)]
    assert Counter((k.backward, k.seq_kv, k.causal) for k in attention) == \
        {(b, 128 // cp, True): 4 for b in (False, True)} | \
        {(b, 64 // cp, False): 4 * (cp - 1) for b in (False, True)}


def test_unfused_attention_all_gathers_whatever_the_type(two_nodes):
    """Megatron's unfused attention has no ring kernel: ``p2p`` (the default) all-gathers."""
    program = transformer(two_nodes, **SMALL, tp=2, cp=2, dp=4, global_batch=8,
                          attention="unfused").programs[0]
    assert [op for op in program.ops if op.name.endswith(".kv.all_gather")]
    assert not [op for op in program.ops if ".ring" in op.name]


def test_ulysses_trades_sequence_shards_for_head_shards(two_nodes):
    """``cp_comm_type: a2a`` (DeepSpeed-Ulysses): an all-to-all of the rank's queries, keys
    and values before the attention, of its output after, the same two in reverse backward;
    the attention runs over the whole sequence on 1 / cp of the TP rank's heads (causal); no
    ring, no gather. Heads and key-value heads must divide over tp * cp."""
    cp = 4
    spec = dict(SMALL, tp=2, cp=cp, dp=2, global_batch=4, kv_heads=8, sp=True,
                cp_comm_type="a2a")
    program = transformer(two_nodes, **spec).programs[0]
    n, q, kv = 2 * 128 // cp, 256 // 2, 8 // 2 * 32   # tokens, query and kv widths per rank
    a2a = [op for op in program.ops if ".attention.a2a_" in op.name]
    assert Counter((op.name.split(".", 2)[2], op.size) for op in a2a) == {   # per layer
        ("attention.a2a_in", n * (q + 2 * kv) * 2): 4, ("attention.a2a_out", n * q * 2): 4,
        ("attention.a2a_out.dgrad", n * q * 2): 4,
        ("attention.a2a_in.dgrad", n * (q + 2 * kv) * 2): 4}
    assert {op.collective for op in a2a} == {"all_to_all"}
    by_id = {op.id: op for op in program.ops}
    for layer in range(4):   # the attention between its two all-to-alls, both ways
        chain = [f"mb0.layer{layer}.{x}" for x in (
            "attention.a2a_in", "attention_core", "attention.a2a_out",
            "attention.a2a_out.dgrad", "attention_core.dgrad", "attention.a2a_in.dgrad")]
        ops = {op.name: op for op in program.ops if op.name in chain}
        for before, after in [chain[0:2], chain[1:3], chain[3:5], chain[4:6]]:
            assert before in {by_id[d].name for d in ops[after].deps}
    assert not [op for op in program.ops if ".kv." in op.name]
    attention = [k for op in _ops(program, "compute") for k in op.kernels
                 if isinstance(k, Attention)]
    assert {(k.heads, k.kv_heads, k.seq_q, k.seq_kv, k.causal) for k in attention} == \
        {(8 // 2 // cp, 8 // 2 // cp, 128, 128, True)}
    with pytest.raises(ConfigError, match=r"'kv_heads': expected a multiple of tp \* cp = 8 "
                                          r"with cp_comm_type: a2a"):
        transformer(two_nodes, **dict(spec, kv_heads=4))
    with pytest.raises(ConfigError, match=r"'cp_comm_type': expected p2p or all_gather with "
                                          r"unfused attention"):
        transformer(two_nodes, **dict(spec, attention="unfused"))


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_the_ring_hides_what_the_all_gather_exposes(model):
    """At a long sequence a ring step's attention outlasts its exchange, so the ring hides
    nearly all of its communication behind the attention, where the all-gather exposes the
    gather beyond the local block and the whole gradient reduction."""
    spec = dict(generator="transformer", layers=2, hidden=4096, ffn=11008, heads=32, vocab=0,
                sequence=32768,
                global_batch=2, micro_batch=1, tp=2, cp=4, dp=2, sp=True, gated_mlp=True,
                device="h100")
    net = flowsim.load_network({"cluster": {"device": "h100", "nodes": 2}})
    exposed = {kind: flowsim.run_training(net, dict(spec, cp_comm_type=kind), "nccl",
                                          model=model).summary()["exposed_comm_ns"]
               for kind in ("p2p", "all_gather")}
    assert exposed["p2p"] < exposed["all_gather"]


@pytest.mark.parametrize("flag, expected", [("p2p", "p2p"), ("allgather", "all_gather"),
                                            ("a2a", "a2a"), (None, "p2p")])
def test_the_importers_read_the_context_parallel_communication_type(flag, expected):
    """Megatron-LM's ``--cp-comm-type`` (default p2p; ``allgather``, ``a2a``) and NeMo's
    ``model.cp_comm_type`` (Transformer Engine's spelling, ``all_gather``); the hierarchical
    ``a2a+p2p`` is refused in one line naming the flag."""
    from flowsim.workload.generators.megatron import megatron_keys
    from flowsim.workload.generators.nemo import nemo_keys

    args = "--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 1024 " \
        "--context-parallel-size 2 --bf16" + (f" --cp-comm-type {flag}" if flag else "")
    spec = parse_transformer({k: v for k, v in megatron_keys(args, "run.sh").items()},
                             "run.sh")
    assert spec.cp_comm_type == expected
    model = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
             "context_parallel_size": 2}
    if flag:
        model["cp_comm_type"] = "all_gather" if flag == "allgather" else flag
    keys = nemo_keys({"trainer": {}, "model": model}, "nemo.yml")
    assert keys.get("cp_comm_type", "p2p") == expected
    if flag:   # NeMo's per-layer list: one kind for every layer, or refused
        model["cp_comm_type"] = [model["cp_comm_type"]] * 2
        assert nemo_keys({"trainer": {}, "model": model}, "nemo.yml")["cp_comm_type"] == \
            expected
        model["cp_comm_type"] = [flag, "a2a+p2p"]
        with pytest.raises(ConfigError, match=r"'model.cp_comm_type': expected one type for "
                                              r"every layer"):
            nemo_keys({"trainer": {}, "model": model}, "nemo.yml")
    if flag:   # Megatron-LM's per-layer list (nargs='+'), the same rule
        per_layer = megatron_keys(args + f" {flag} 2>&1", "run.sh")
        assert per_layer["cp_comm_type"] == expected
        with pytest.raises(ConfigError, match=r"'--cp-comm-type': expected one type for "
                                              r"every layer .*found \['"):
            megatron_keys(args + (" a2a" if flag != "a2a" else " p2p"), "run.sh")
    with pytest.raises(ConfigError, match=r"run.sh: args: key '--cp-comm-type': expected p2p, "
                                          r"allgather or a2a, found 'a2a\+p2p'"):
        megatron_keys(args.replace(f" --cp-comm-type {flag}", "") + " --cp-comm-type a2a+p2p",
                      "run.sh")


@pytest.mark.parametrize("cp", [1, 2])
def test_rotary_embeddings_rotate_queries_and_keys_forward_and_backward(two_nodes, cp):
    """``position_embedding: rope`` adds one memory-bound kernel after the QKV GEMM and one
    before its data gradient, each reading and writing the rank's queries and keys (16-bit)
    once; nothing else changes, and the other kinds add nothing."""
    spec = dict(SMALL, tp=2, cp=cp, dp=8 // cp, kv_heads=2, global_batch=2 * 8 // cp)

    def ropes(kind):
        w = transformer(two_nodes, **spec, position_embedding=kind)
        return [k for op in _ops(w.programs[0], "compute") for k in op.kernels
                if isinstance(k, Elementwise) and k.name == "rope"], w
    rope, w = ropes("rope")
    tokens, q, kv = 2 * 128 // cp, 256 // 2, 2 // 2 * 32   # micro-batch 2, head_dim 32
    assert len(rope) == 2 * 4 and {k.bytes for k in rope} == {2 * tokens * (q + kv) * 2}
    for kind in ("learned_absolute", "alibi", "none"):
        none, plain = ropes(kind)
        assert none == [] and len(plain.programs[0].ops) <= len(w.programs[0].ops)
    with pytest.raises(ConfigError, match=r"'position_embedding': expected one of "
                                          r"learned_absolute, rope, alibi, none"):
        transformer(two_nodes, **spec, position_embedding="sinusoid")


@pytest.mark.parametrize("cp, overlap", [(1, False), (1, True), (2, False), (2, True)])
def test_the_rotary_backward_runs_before_the_qkv_backward_starts(two_nodes, cp, overlap):
    """Megatron-Core rotates the gradients outside the QKV linear layer, so the rotary
    backward finishes before that layer's backward gathers its input again (sequence
    parallelism) and never hides beside that all-gather; with CP it follows the key and
    value gradients home (the ring's last exchange of them)."""
    w = transformer(two_nodes, **dict(SMALL, tp=2, cp=cp, dp=8 // cp, sp=True,
                                      global_batch=2 * 8 // cp), position_embedding="rope",
                    tp_comm_overlap=overlap)
    program = w.programs[0]
    for layer in range(4):
        (regather,) = [op for op in program.ops
                       if op.name == f"mb0.layer{layer}.attention.dgrad.qkv.input.all_gather"]
        rope = [op for op in program.ops if op.pass_ == "ig" and op.name.startswith(
            f"mb0.layer{layer}.") and any(getattr(k, "name", "") == "rope" for k in op.kernels)]
        assert len(rope) == 1 and rope[0].id in ancestors(program, regather)
        if cp > 1:
            (home,) = [op for op in program.ops
                       if op.name == f"mb0.layer{layer}.kv_grad.ring{cp - 1}"]
            assert home.id in ancestors(program, rope[0])


def test_mixture_of_experts_dispatches_over_the_expert_group(two_nodes):
    w = transformer(two_nodes, **SMALL, tp=2, dp=8, ep=4, experts=8, top_k=2, sp=True,
                    global_batch=16, gated_mlp=True)
    program = w.programs[0]
    a2a = _ops(program, "collective", "all_to_all")
    tokens = 2 * 128 // 2                          # the rank's sequence-parallel shard
    assert Counter(op.pass_ for op in a2a) == {"fwd": 2 * 4, "ig": 2 * 4}
    assert {op.size for op in a2a} == {tokens * 2 * 256 * 2}
    experts = [k for op in _ops(program, "compute") for k in op.kernels
               if isinstance(k, Gemm) and k.batch == 2]
    assert experts                                 # 8 experts over ep 4: 2 per rank
    names = {op.name.split(".")[0] for op in _ops(program, "collective", name="grads")}
    assert names == {"dense_grads", "expert_grads"}



@pytest.mark.parametrize("overlap", [False, True])
def test_the_distributed_optimizer_gathers_what_it_reduce_scattered(two_nodes, overlap):
    """With experts the distributed optimizer shards two groups' optimizer states: the
    dense over the data-parallel ranks, the experts' over the expert-data-parallel ones.
    Each is reduce-scattered (FP32 gradients) and all-gathered back (16-bit parameters)
    over the same ranks and the same buckets, the gathers in forward order: after the
    optimizer step, or (overlapped) a chain whose first gather starts with the iteration
    and whose next one waits for the forward to reach the bucket before it."""
    w = transformer(two_nodes, **SMALL, tp=2, dp=8, ep=4, experts=8, top_k=2, sp=True,
                    global_batch=16, gated_mlp=True, distributed_optimizer=True,
                    overlap_grad_reduce=overlap, overlap_param_gather=overlap,
                    bucket_size=300_000)
    program = w.programs[0]
    ops = program.ops
    step = next(op.id for op in ops if op.name == "optimizer")
    first_gathers = {}
    for group, ranks in (("dense", 8), ("expert", 2)):
        rs = _ops(program, "collective", "reduce_scatter", f"{group}_grads")
        kind = ".expert_params." if group == "expert" else ".params."
        ag = _ops(program, "collective", "all_gather", kind)
        first_gathers[group] = ag[0].id
        # buckets only to overlap the reduction: else one
        assert len(ag) == len(rs) and (len(rs) > 1) == overlap
        assert {op.dims for op in rs} == {op.dims for op in ag}
        assert int(np.prod([w.network.dims[d] for d in ag[0].dims])) == ranks
        for gather, reduce in zip(ag, reversed(rs)):   # a bucket's FP32 gradients, 2x
            assert gather.size * ranks * 2 == pytest.approx(reduce.size, abs=2 * ranks)
        if not overlap:
            assert all(op.deps == (step,) for op in ag)
            continue
        assert ag[0].deps == ()
        for before, gather in zip(ag, ag[1:]):
            assert before.id in gather.deps             # one gather in flight at a time
            # dispatched as the forward starts on the bucket before: with the data it waits for
            waiting = next(op for op in ops if before.id in op.deps and op.kind == "compute")
            assert set(gather.deps) <= {*waiting.deps, *waiting.ctrl_deps}
            assert gather.id < waiting.id
    # the first layer's forward waits for both groups' first gathers only when overlapped
    first = next(op for op in ops if op.name.startswith("mb0.layer0"))
    for gather in first_gathers.values():
        assert (gather in ancestors(program, first)) == overlap


def test_a_chain_of_gathers_behind_a_longer_forward_exposes_only_its_first_bucket():
    """Timed, not only wired: when each layer's forward outlasts the next bucket's gather,
    the chained gathers hide all but the first, so the iteration is (buckets - 1) gathers
    shorter than with every gather after the optimizer step (each timed alone by
    ``run_collective``); when the gathers outlast the forwards, less than that hides."""
    net = {"topology": ["Switch"], "npus_count": [2], "bandwidth": [50], "latency": [0]}
    keys = dict(layers=4, hidden=1024, heads=8, micro_batch=1, vocab=0, tp=1, pp=1, dp=2,
                global_batch=2, distributed_optimizer=True, overlap_grad_reduce=True,
                bucket_size=12 * 1024 * 1024, device="h100")   # one bucket per layer
    for sequence, hidden_fully in ((8192, True), (2048, False)):
        spec = dict(generator="transformer", sequence=sequence, **keys)
        times = {overlap: float(simulate(net, dict(spec, overlap_param_gather=overlap),
                                         "nccl").time_ns) for overlap in (True, False)}
        program = transformer(flowsim.load_network(net), sequence=sequence,
                              overlap_param_gather=True, **keys).programs[0]
        gathers = _ops(program, "collective", "all_gather", ".params.bucket")
        assert len(gathers) == 4 and len({op.size for op in gathers}) == 1
        one = flowsim.run_collective(net, "all_gather", gathers[0].size, system="nccl").time_ns
        saved = times[False] - times[True]
        if hidden_fully:
            assert saved == pytest.approx(3 * one, rel=1e-9)
        else:
            assert 0 < saved < 3 * one * (1 - 1e-3)


@pytest.mark.parametrize("align", [True, False])
def test_interleaved_gathers_start_a_chunk_at_a_time_aligned_over_the_pipeline(align):
    """Megatron-Core's interleaved schedule (``align_param_gather``, its default): a chunk's
    gathers all start together, chunks 0 and 1 with the iteration and chunk j when the
    forward whose virtual micro-batch, shifted by the pipeline rank, is chunk j - 1's first
    begins; none waits for another. Not aligned: one chain over the chunks."""
    from flowsim.workload.generators.transformer_parse import parse_transformer
    from flowsim.workload.generators.transformer_schedule import stage_schedule

    net = flowsim.load_network({"topology": ["Switch", "Switch"], "npus_count": [2, 4],
                                "bandwidth": [300, 25], "latency": [0, 0]})
    values = dict(layers=16, hidden=256, heads=8, sequence=128, micro_batch=1, vocab=0,
                  tp=1, pp=4, dp=2, vpp=4, global_batch=16, distributed_optimizer=True,
                  overlap_grad_reduce=True, overlap_param_gather=True, bucket_size=100_000,
                  align_param_gather=align)
    spec = parse_transformer(values, "test")
    w = transformer(net, **values)
    for stage, program in enumerate(w.programs):
        ops = program.ops
        gathers = _ops(program, "collective", "all_gather", ".params.bucket")
        chunks = [int(op.name.split(".")[0][len("chunk"):]) for op in gathers]
        assert chunks == sorted(chunks) and set(chunks) == {0, 1, 2, 3}
        if not align:
            assert gathers[0].deps == () and all(
                before.id in op.deps for before, op in zip(gathers, gathers[1:]))
            continue
        gathered = {op.id for op in gathers}
        assert not any(gathered & set(op.deps) for op in gathers)
        assert all(op.deps == () for op, c in zip(gathers, chunks) if c < 2)
        forwards = [u for u in stage_schedule(spec, stage) if u[0] == "fwd"]
        for chunk in (2, 3):
            deps = {op.deps for op, c in zip(gathers, chunks) if c == chunk}
            assert len(deps) == 1
            (last,) = deps.pop()
            _, c, m = forwards[forwards.index(("fwd", chunk - 1, 0)) - stage]
            after = next(op for op in ops[last + 1:] if op.kind == "compute")
            assert after.name.startswith(f"mb{m}.chunk{c}.")   # the forward that starts them


@pytest.mark.parametrize("vpp", [1, 2])
@pytest.mark.parametrize("align", [True, False])
def test_pipelined_gradients_are_reduced_a_chunk_at_a_time_aligned_over_stages(vpp, align):
    """Megatron-LM's ``align_grad_reduce`` (r0.8's ``delay_grad_reduce``; default): with
    PP, a chunk's buckets are all reduced together once its gradients are complete, at the
    backward whose virtual micro-batch shifted back by the pipeline rank is the chunk's last
    (interleaved), or, without interleaving, the first stage's bucket by bucket during its
    last backward and the other stages' after theirs. Not aligned: bucket by bucket as each
    is ready, on every stage."""
    from flowsim.workload.generators.transformer_parse import parse_transformer
    from flowsim.workload.generators.transformer_schedule import stage_schedule

    net = flowsim.load_network({"topology": ["Switch", "Switch"], "npus_count": [2, 4],
                                "bandwidth": [300, 25], "latency": [0, 0]})
    values = dict(layers=16, hidden=256, heads=8, sequence=128, micro_batch=1, vocab=0,
                  tp=1, pp=4, dp=2, vpp=vpp, global_batch=16, distributed_optimizer=True,
                  overlap_grad_reduce=True, bucket_size=100_000, align_grad_reduce=align)
    spec = parse_transformer(values, "test")
    w = transformer(net, **values)
    for stage, program in enumerate(w.programs):
        ops = program.ops
        reductions = _ops(program, "collective", "reduce_scatter", "dense_grads")
        assert len(reductions) > vpp
        backwards = [u for u in stage_schedule(spec, stage) if u[0] == "bwd"]
        if not align or (vpp == 1 and stage == 0):   # each bucket as its gradients are
            assert len({op.deps for op in reductions}) == len(reductions)
            continue
        groups = {}
        for op in reductions:
            groups.setdefault(op.deps, []).append(op)
        assert len(groups) == vpp                      # a chunk's buckets together
        for deps in groups:
            (last,) = deps
            # what the last op before them belongs to: the backward that starts them
            done = ops[last].name.split(".")
            if vpp == 1:   # after the stage's last backward
                assert not [op for op in ops[last + 1:]
                            if op.kind == "compute" and op.name != "optimizer"]
                continue
            m, c = int(done[0][2:]), int(done[1][5:])
            shifted = backwards.index(("bwd", c, m)) - stage
            finals = {max(i for i, u in enumerate(backwards) if u[1] == chunk)
                      for chunk in range(vpp)}
            # at the backward a chunk's last one shifted by the pipeline rank, or at the end
            assert shifted in finals or (c, m) == backwards[-1][1:]


@pytest.mark.parametrize("expert_tp", [2, 1])
def test_experts_split_over_tensor_parallel_ranks_gather_their_tokens(two_nodes, expert_tp):
    """Megatron-Core's all-to-all dispatcher (core_r0.9.0) with TP 2: the experts are split
    over the TP ranks (its default), so after the all-to-all the received tokens are
    all-gathered over TP and the experts' output reduce-scattered before the all-to-all back,
    and each rank runs half an expert's width on twice the tokens; ``expert_tp: 1`` keeps
    whole experts per rank, without those collectives, and reduces their gradients over the
    TP ranks too."""
    ffn, hidden, ep, experts, top_k, cf = 1024, 256, 4, 8, 2, 1.0
    w = transformer(two_nodes, **SMALL, tp=2, dp=8, ep=ep, experts=experts, top_k=top_k,
                    ffn=ffn, global_batch=16, gated_mlp=True, expert_tp=expert_tp)
    program = w.programs[0]
    tokens = 2 * 128 // 2                            # the rank's sequence-parallel shard
    dispatch = int(tokens * top_k * cf * hidden * 2)
    tp_dims = _ops(program, "collective", "all_gather", "attention")[0].dims
    around = [op for op in _ops(program, "collective", name="experts")]
    if expert_tp == 1:
        assert not around
    else:
        count = Counter((op.collective, op.pass_, op.size, op.dims) for op in around)
        per = 4                                      # layers x one micro-batch
        assert count == {("all_gather", "fwd", dispatch, tp_dims): per,
                         ("reduce_scatter", "fwd", 2 * dispatch, tp_dims): per,
                         ("all_gather", "ig", dispatch, tp_dims): per,
                         ("reduce_scatter", "ig", 2 * dispatch, tp_dims): per}
    received = ep * tokens * top_k * cf / experts    # per local expert
    fc1 = {(k.m, k.n, k.k, k.batch) for op in _ops(program, "compute", name="experts")
           if op.pass_ == "fwd" for k in op.kernels if isinstance(k, Gemm) and k.k == hidden}
    assert fc1 == {(received * expert_tp, 2 * ffn // expert_tp, hidden, experts // ep)}
    grads = _ops(program, "collective", name="expert_grads")
    group = int(np.prod([w.network.dims[d] for d in grads[0].dims]))
    assert group == (8 // ep) * (2 // expert_tp)     # dp / ep, times TP ranks sharing


def test_experts_with_tensor_parallelism_imply_sequence_parallelism():
    spec = parse_transformer(dict(SMALL, tp=2, dp=2, ep=2, experts=4, global_batch=4),
                             "argument")
    assert spec.sp and spec.expert_tp == 2
    dense = parse_transformer(dict(SMALL, tp=2, dp=2, global_batch=4), "argument")
    assert not dense.sp


# ------------------------------------------------------------------ schedules and layouts
def test_one_f_one_b_and_gpipe_orders():
    spec = parse_transformer(dict(SMALL, pp=4, micro_batches=8), "argument")
    assert stage_schedule(spec, 3)[:4] == [("fwd", 0, 0), ("bwd", 0, 0), ("fwd", 0, 1),
                                           ("bwd", 0, 1)]
    assert [u[0] for u in stage_schedule(spec, 0)[:4]] == ["fwd"] * 4
    gpipe = parse_transformer(dict(SMALL, pp=4, micro_batches=3, schedule="gpipe"), "x")
    assert stage_schedule(gpipe, 1) == [("fwd", 0, m) for m in range(3)] + \
        [("bwd", 0, m) for m in range(3)]


@pytest.mark.parametrize("stage", range(4))
def test_interleaved_schedule_runs_every_chunk_once_each_way(stage):
    spec = parse_transformer(dict(SMALL, layers=16, pp=4, vpp=2, micro_batches=8), "x")
    order = stage_schedule(spec, stage)
    assert sorted(order) == sorted([(p, c, m) for p in ("fwd", "bwd") for c in range(2)
                                    for m in range(8)])
    where = {u: i for i, u in enumerate(order)}
    assert all(where[("fwd", c, m)] < where[("bwd", c, m)] for c in range(2)
               for m in range(8))
    first_backward = next(i for i, u in enumerate(order) if u[0] == "bwd")
    # Megatron-LM's warm-up forwards, then one more forward before the first backward
    assert first_backward == (4 - stage - 1) * 2 + (2 - 1) * 4 + 1
    assert order[first_backward][1] == 1                   # it is on the last chunk


def test_layouts():
    def counts(**kw):
        return layer_counts(parse_transformer(dict(SMALL, micro_batches=16, **kw), "x"))
    assert counts(layers=8, pp=4) == [2] * 4
    assert counts(layers=126, pp=16, vpp=4, pipeline_layout="first_last_fewer") == \
        [1] + [2] * 62 + [1]
    assert counts(layers=7, pp=2, pipeline_layout=[3, 4]) == [3, 4]
    with pytest.raises(ConfigError, match=r"'layers'.*multiple of pp \* vpp = 4.*"
                                          r"first_last_fewer"):
        counts(layers=6, pp=4)
    with pytest.raises(ConfigError, match=r"'pipeline_layout'.*adding up to layers=7"):
        counts(layers=7, pp=2, pipeline_layout=[3, 3])
    # DeepSpeed's partition_uniform: the first stages take the extra layers
    assert counts(layers=7, pp=4, pipeline_layout="uniform") == [2, 2, 2, 1]
    # torchtitan's split: embedding and output weigh a layer each, extras to the first
    # stages; Llama 3's first_last_fewer where they divide
    assert counts(layers=31, pp=4, pipeline_layout="embedding_weighted") == [8, 8, 8, 7]
    assert counts(layers=126, pp=16, vpp=4, pipeline_layout="embedding_weighted") == \
        counts(layers=126, pp=16, vpp=4, pipeline_layout="first_last_fewer")
    with pytest.raises(ConfigError, match=r"'layers': expected at least 2"):
        counts(layers=1, pp=4, pipeline_layout="embedding_weighted")


@pytest.mark.parametrize("kw", [dict(), dict(vpp=2, layers=8), dict(schedule="gpipe"),
                                dict(scatter_gather=False), dict(sp=True)])
def test_pipeline_messages_pair_up_and_simulate(two_nodes, kw):
    """Every send has its recv (same tag, opposite offset); the run finishes."""
    spec = dict(SMALL, tp=2, dp=2, pp=4, micro_batches=4, **kw)
    w = transformer(two_nodes, **spec)
    sends = Counter((op.tag, int(p.npus[0]) + op.peer_offset) for p in w.programs
                    for op in _ops(p, "send"))
    recvs = Counter((op.tag, int(p.npus[0])) for p in w.programs for op in _ops(p, "recv"))
    assert sends == recvs and sends
    _check_graph(w)
    for model in ("analytical", "flow"):
        ds = simulate(two_nodes, w, "nccl", model=model)
        assert float(ds.time_ns) > 0


def test_interleaving_shrinks_the_pipeline_bubble():
    """Equal stages on a network too fast to matter: 1F1B idles (p - 1) / m of the time,
    interleaving v ways about (p - 1) / (v m) (Narayanan et al. 2021, sec. 2.2)."""
    net = {"topology": ["Switch"], "npus_count": [4], "bandwidth": [1e9], "latency": [0]}
    spec = dict(SMALL, layers=8, pp=4, micro_batches=8, device="h100")
    t = {v: float(simulate(net, dict(generator="transformer", **spec, **(
        {"vpp": v} if v > 1 else {})), {"endpoint-delay": 0}).time_ns) for v in (1, 2)}
    one = transformer(flowsim.load_network(net), **spec)
    work = simulate(net, one, {"endpoint-delay": 0})
    per_stage = float(work.compute_ns.max())
    assert t[1] == pytest.approx(per_stage * (1 + 3 / 8), rel=0.1)
    assert t[2] < t[1]


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 8, 4), (8, 16, 12)])
def test_the_interleaved_bubble_is_megatron_s(p, m, v):
    """Equal stages on a network too fast to matter: Megatron's interleaved 1F1B with ``v``
    model chunks per rank idles (p - 1) / (v m) of its compute (Narayanan et al. 2021,
    sec. 2.2), down to GPT-3's layout in MLPerf (PP 8, 12 chunks of one layer)."""
    net = {"topology": ["Switch"], "npus_count": [p], "bandwidth": [1e9], "latency": [0]}
    spec = dict(SMALL, layers=p * v, pp=p, vpp=v, micro_batches=m, device="h100")
    ds = simulate(net, dict(generator="transformer", **spec), {"endpoint-delay": 0})
    assert float(ds.time_ns) / float(ds.compute_ns.max()) == pytest.approx(
        1 + (p - 1) / (v * m), rel=2e-3)


def test_the_breakdown_separates_the_pipeline_bubble():
    """Equal stages, no collectives, a network too fast to matter: every stage idles
    (p - 1) forward-and-backward slots of the iteration (1F1B's bubble, Narayanan et al.
    2021, sec. 2.2): waiting on its receives, then (a later stage) after its last backward
    until the first stage is done. None of it is exposed communication; the parts add up to
    each NPU's time."""
    net = {"topology": ["Switch"], "npus_count": [4], "bandwidth": [1e9], "latency": [0]}
    p, m = 4, 8
    spec = dict(SMALL, layers=8, pp=p, micro_batches=m, device="h100")
    ds = simulate(net, dict(generator="transformer", **spec), {"endpoint-delay": 0})
    np.testing.assert_allclose(ds.compute_ns + ds.exposed_comm_ns + ds.bubble_ns + ds.idle_ns,
                               ds.finish_ns, rtol=1e-12)
    assert float(ds.exposed_comm_ns.max()) < 1e-6 * float(ds.time_ns)
    slot = float(ds.compute_ns.mean()) / m      # one micro-batch forward and backward
    np.testing.assert_allclose(ds.bubble_ns + ds.time_ns - ds.finish_ns, (p - 1) * slot,
                               rtol=0.05)
    assert ds.attrs["bubble_share"] == pytest.approx(
        float(ds.bubble_ns.mean()) / float(ds.finish_ns.mean()))


def test_model_flops_throughput_and_mfu(two_nodes):
    """model_flops is Narayanan et al.'s closed form without recomputation for a GPT
    (72 B s L h^2 (1 + s / 6h + V / 12 L h)); TFLOP/s per NPU and MFU follow from the time
    and the device's BF16 peak."""
    spec = dict(SMALL, vocab=1024, tp=2, dp=8, global_batch=32, device="a100")
    ds = simulate(two_nodes, dict(generator="transformer", **spec), "nccl")
    B, s, L, h, V = 32, 128, 4, 256, 1024
    closed = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert ds.attrs["model_flops"] == pytest.approx(closed, rel=1e-12)
    per_npu = closed / (float(ds.time_ns) * 1e-9) / 16
    assert ds.attrs["tflops_per_npu"] == pytest.approx(per_npu / 1e12, rel=1e-12)
    assert ds.attrs["mfu"] == pytest.approx(per_npu / 312e12, rel=1e-12)
    unknown = simulate(two_nodes, flowsim.workload.graph.spmd([], 16))   # no model known
    assert "model_flops" not in unknown.attrs and "mfu" not in unknown.attrs


# ------------------------------------------------------------------ FLOPs and time
def test_gemm_flops_are_six_times_tokens_times_weights(two_nodes):
    """Forward, data and weight gradients: every weight matrix's GEMMs cost 6 FLOPs per token
    per weight over the iteration (2 forward, 4 backward), summed over the TP ranks."""
    h, t, tokens = 256, 2, 8 * 128
    w = transformer(two_nodes, **dict(SMALL, micro_batch=1, vocab=1000), tp=t, dp=8,
                    global_batch=8, gated_mlp=True, ffn=512)
    gemm = sum(k.flops for op in _ops(w.programs[0], "compute") for k in op.kernels
               if isinstance(k, Gemm))
    weights = 4 * (4 * h * h + 3 * h * 512) + 1024 * h     # layers; vocab padded to 128 t
    assert gemm * t * 8 == pytest.approx(6 * tokens * weights)


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_one_rank_iteration_is_its_kernels_in_a_row(model):
    """No parallelism: the iteration is the sum of its kernels' times (one stream)."""
    net = {"topology": ["Switch"], "npus_count": [2], "bandwidth": [50], "latency": [500]}
    w = transformer(flowsim.load_network(net), **SMALL, dp=2, global_batch=4,
                    device="a100")
    device = flowsim.compute.DeviceModel("a100")
    busy = sum(device.kernels_ns(op.kernels) for op in _ops(w.programs[0], "compute"))
    ds = simulate(net, w, {"endpoint-delay": 0, "preferred-dataset-splits": 1}, model=model)
    np.testing.assert_allclose(ds.compute_ns, busy, rtol=1e-12)
    assert float(ds.time_ns) >= busy


@pytest.mark.parametrize("preset, forward, backward", [("h100", 370 / 989.4, 322 / 989.4),
                                                       ("a100", 0.73, 0.55)])
def test_flash2_prices_flashattention_2_where_the_device_has_a_newer_kernel(
        two_nodes, preset, forward, backward):
    """``attention: flash2`` makes the same attention kernels, priced at FlashAttention-2's
    measured fraction of peak: on H100 370 and 322 TFLOP/s forward and backward (the
    FlashAttention-3 paper's figures, head dimension 128) instead of cuDNN's; on A100, whose
    kernel is FlashAttention-2, unchanged. At head dimension 128, where the
    presets' rates are measured (the head-dimension model has tests of its own)."""
    from flowsim.compute.attention import attention_ns

    def kernels(attention):
        w = transformer(two_nodes, **dict(SMALL, hidden=1024, sequence=4096), tp=4, dp=4,
                        global_batch=16, attention=attention)
        return [k for op in _ops(w.programs[0], "compute") for k in op.kernels
                if isinstance(k, Attention)]
    fa, fa2 = kernels("flash"), kernels("flash2")
    assert [dataclasses.replace(k, implementation="flash") for k in fa2] == fa
    dev = flowsim.compute.device(preset)
    for k, k2 in zip(fa, fa2):
        rate = dev.attention_backward if k.backward else dev.attention_forward
        launch = dev.launch_us * 1e3
        assert k.head_dim == 128
        ratio = (attention_ns(dev, k2) - launch) / (attention_ns(dev, k) - launch)
        assert ratio == pytest.approx(rate / (backward if k.backward else forward), rel=2e-3)


# ------------------------------------------------------------------ mapping and errors
def test_groups_inside_a_dimension_run_on_a_logical_view(two_nodes):
    """dp 2 x pp 4 inside the 8-GPU node dimension: a view cuts it; pipeline stages sit
    2 NPUs apart; the same for a network whose dims already fit."""
    w = transformer(two_nodes, **dict(SMALL, layers=8), tp=1, dp=2, pp=8, micro_batches=8)
    assert w.network is not None and w.network.dims == (2, 4, 2)
    assert [int(p.npus[0]) for p in w.programs] == [0, 2, 4, 6, 8, 10, 12, 14]
    fits = transformer(two_nodes, **SMALL, tp=8, dp=2, micro_batches=2)
    assert fits.network is None


def test_bytes_of_a_cut_dimension_are_unknown_not_zero(two_nodes):
    """The pieces of a cut dimension share its links: their bytes are NaN (unknown, as a
    fabric's), never 0 B; a dimension left whole keeps its count."""
    spec = dict(generator="transformer", **dict(SMALL, layers=8), tp=1, dp=2, pp=8,
                micro_batches=8)
    ds = simulate(two_nodes, spec, "nccl")
    assert ds.sizes["dim"] == 3
    assert np.isnan(ds.dim_bytes.values[:2]).all()
    assert float(ds.dim_bytes[2]) > 0     # the inter-node dimension, whole
    # the pipeline's piece carries only point-to-point messages: busy while they fly
    assert float(ds.dim_busy_ns[1]) > 0


@pytest.mark.parametrize("change, match", [
    ({"heads": 2}, r"key 'heads': expected a multiple of tp=4"),
    ({"heads": 512}, r"key 'heads': expected a divisor of hidden=256 \(or head_dim given "
                     r"beside it\), found 512"),   # more heads than hidden: was a crash
    ({"heads": 12}, r"key 'heads': expected a divisor of hidden=256"),
    ({"kv_heads": 3}, r"key 'kv_heads'"),
    ({"experts": 6, "ep": 4}, r"key 'experts': expected a multiple of ep=4"),
    ({"ep": 2}, r"key 'ep': expected 1 without experts"),
    ({"experts": 8, "ep": 4, "expert_tp": 2}, r"key 'expert_tp': expected 1 or tp=4"),
    ({"experts": 8, "ep": 4, "moe_ffn": 1026, "gated_mlp": False},
     r"key 'moe_ffn': expected a multiple of expert_tp=4"),
    ({"expert_tp": 1}, r"key 'expert_tp': expected unset \(or tp=4\) without experts"),
    ({"global_batch": 20}, r"key 'global_batch': expected a multiple of micro_batch \* dp"),
    ({"global_batch": None}, r"either global_batch"),
    ({"tp": 8}, r"8 \* 1 \* 4 \* 1 = 32 NPUs, but the network has 16"),
    ({"vpp": 2, "schedule": "1f1b", "tp": 2, "pp": 2},
     r"key 'schedule': expected 'interleaved' or 'dualpipev' when vpp > 1"),
    ({"vpp": 2}, r"key 'vpp': expected 1 without pipeline parallelism \(pp=1\), found 2"),
    ({"recompute": "some"}, r"key 'recompute'"),
    ({"device": "tpu"}, r"key 'device'"),
    ({"cp": 4, "dp": 1, "sequence": 100}, r"key 'sequence'"),
    ({"tp": 1, "dp": 2, "pp": 8, "vpp": 2, "layers": 16, "global_batch": 12},
     r"key 'global_batch': expected a multiple of pp=8 micro-batches per pipeline with the "
     r"interleaved schedule \(Megatron-LM's requirement; global_batch / \(micro_batch \* dp\) "
     r"= 3\), found 12"),
    ({"tp": 1, "dp": 2, "pp": 8, "vpp": 2, "layers": 16, "global_batch": None,
      "micro_batches": 3}, r"key 'micro_batches': expected a multiple of pp=8 micro-batches "
                           r"per pipeline with the interleaved schedule \(Megatron-LM's "
                           r"requirement\), found 3"),
])
def test_bad_specs_are_one_line_naming_the_key(two_nodes, change, match):
    spec = {"generator": "transformer", **SMALL, "tp": 4, "dp": 4, "global_batch": 16}
    spec.update(change)
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(ConfigError, match=match):
        build_generator(spec, "spec.yml", two_nodes)


@pytest.mark.parametrize("written, dtype", [
    ("bfloat16", "bf16"), ("float16", "fp16"), ("BF16", "bf16"), ("e4m3", "fp8"),
    ("hybrid", "fp8"), ("float8_e4m3fn", "fp8")])
def test_a_dtype_spelled_as_pytorch_or_transformer_engine_does_is_that_dtype(written, dtype):
    """A Hugging Face config's ``torch_dtype: bfloat16``, Transformer Engine's FP8 formats."""
    from flowsim.workload.generators.transformer_parse import parse_transformer

    base = {**SMALL, "tp": 4, "dp": 4, "global_batch": 16}
    assert parse_transformer({**base, "dtype": written}, "spec.yml").dtype == dtype
    with pytest.raises(ConfigError, match=r"key 'dtype': expected one of bf16, fp16, fp8, "
                                          r"found 'fp4'"):
        parse_transformer({**base, "dtype": "fp4"}, "spec.yml")


@pytest.mark.parametrize("fused, impl", [(False, "native"), (True, "native"), (True, "te"),
                                         (True, "flash_attn"), (True, "compiled"),
                                         (True, "torch")])
def test_cross_entropy_moves_the_bytes_of_its_steps_per_logit(two_nodes, fused, impl):
    """The vocabulary-parallel cross entropy over a rank's logits (tokens x padded
    vocabulary / TP), per micro-batch: Megatron-Core's unfused one, a 16-to-32-bit cast, max,
    subtract, exp, sum and divide forward (38 bytes per logit), scale and cast back backward
    (14); its fused one, three kernels forward (22) and one backward (6); Transformer
    Engine's, two passes over the 16-bit logits forward, the second writing the gradient
    over them (2 + 2 + 2), and that gradient scaled in place backward (2 + 2); flash-attn's
    and a compiled one, one read forward (2), a read and the gradient written backward;
    PyTorch's eager one, the log-softmax read and written (2 + 2), backward the loss's
    gradient written dense (2), then read with the log-softmax's output and the gradient
    written (2 + 2 + 2)."""
    t, micro = 2, 4
    w = transformer(two_nodes, **dict(SMALL, vocab=1000), tp=t, dp=8,
                    global_batch=8 * 2 * micro, cross_entropy_fusion=fused,
                    cross_entropy_fusion_impl=impl)
    logits = 2 * 128 * 1024 // t   # tokens (2 sequences) x vocabulary padded to 128 t, / TP
    kernels = [k for op in _ops(w.programs[0], "compute") for k in op.kernels
               if isinstance(k, Elementwise) and k.name.startswith("cross_entropy")]
    forward = sum(k.bytes for k in kernels if k.name == "cross_entropy")
    backward = sum(k.bytes for k in kernels if k.name == "cross_entropy_backward")
    per_logit = {(False, "native"): (2 + 4 + 4 + 8 + 8 + 4 + 8, 8 + 4 + 2),
                 (True, "native"): (22, 6), (True, "te"): (2 + 2 + 2, 2 + 2),
                 (True, "flash_attn"): (2, 2 + 2), (True, "compiled"): (2, 2 + 2),
                 (True, "torch"): (2 + 2, 2 + 2 + 2 + 2)}[fused, impl]
    assert (forward, backward) == (per_logit[0] * logits * micro, per_logit[1] * logits * micro)


def test_every_cross_entropy_a_spec_can_name_has_its_costs():
    """The costs table covers the unfused steps and every implementation the spec accepts."""
    from flowsim.workload.generators.transformer_choices import CROSS_ENTROPY_IMPLS
    from flowsim.workload.generators.transformer_shapes import CROSS_ENTROPY

    assert set(CROSS_ENTROPY) == {"unfused", *CROSS_ENTROPY_IMPLS}


def test_training_metrics_read_each_micro_batch_s_logits_after_its_backward(two_nodes):
    """``metric_cross_entropies``: Composer's language metrics compute PyTorch's cross entropy
    over the logits again after every micro-batch's backward: a cast to FP32 and a
    log-softmax, 22 bytes per logit each, on the last stage, between that backward and the
    next forward."""
    t, micro = 2, 4
    w = transformer(two_nodes, **dict(SMALL, vocab=1000), tp=t, dp=8,
                    global_batch=8 * 2 * micro, metric_cross_entropies=2)
    logits = 2 * 128 * 1024 // t
    ops = w.programs[0].ops
    metrics = [op for op in ops if op.name.endswith(".train_metrics")]
    assert [op.name for op in metrics] == [f"mb{m}.train_metrics" for m in range(micro)]
    assert all(sum(k.bytes for k in op.kernels) == 2 * 22 * logits for op in metrics)
    for m, op in enumerate(metrics):
        before = [o for o in ops[:op.id] if o.name.startswith(f"mb{m}.") and o.pass_ != "fwd"]
        assert before and not any(o.name.startswith(f"mb{m}.") and o.pass_ in ("ig", "wg")
                                  for o in ops[op.id + 1:])
    assert not any(op.name.endswith(".train_metrics")
                   for op in transformer(two_nodes, **dict(SMALL, vocab=1000), tp=t, dp=8,
                                         global_batch=8 * 2 * micro).programs[0].ops)


def test_transformer_engine_s_cross_entropy_keeps_16_bit_logits_and_needs_the_fusion():
    """Under Transformer Engine's cross entropy the last stage keeps the 16-bit logits (their
    gradient is written over them), half of the FP32 copy the native one keeps; named
    without the fusion it is warned of and the unfused one priced (as Megatron-Core runs
    it); training metrics without a vocabulary are refused."""
    from flowsim.workload.generators.transformer_parse import parse_transformer

    base = dict(SMALL, vocab=32000, micro_batch=2, global_batch=16, dp=8,
                cross_entropy_fusion=True)
    net = flowsim.load_network({"topology": ["Switch"], "npus_count": [8], "bandwidth": [100],
                                "latency": [500]})
    native, te = (transformer(net, **base, cross_entropy_fusion_impl=impl).memory["activations"]
                  for impl in ("native", "te"))
    logits = 2 * SMALL["sequence"] * 32000   # a micro-batch's tokens x the vocabulary
    assert native - te == pytest.approx(2 * logits)
    with pytest.warns(FlowsimWarning, match=r"spec\.yml: cross_entropy_fusion_impl te "
                                            r"without cross_entropy_fusion: the unfused"):
        alone = parse_transformer(dict(base, cross_entropy_fusion=False,
                                       cross_entropy_fusion_impl="te"), "spec.yml")
    assert alone.cross_entropy == "unfused"
    with pytest.raises(ConfigError, match=r"key 'metric_cross_entropies': expected 0 without "
                                          r"a vocabulary"):
        parse_transformer(dict(base, vocab=0, metric_cross_entropies=2), "spec.yml")


def test_the_run_says_its_layout(two_nodes, capsys, tmp_path):
    """The summary, --json and the Dataset carry the layout the generator built (its
    degrees, schedule, sharding and micro-batches per pipeline)."""
    import yaml

    from flowsim.cli import main

    spec = {"generator": "transformer", **SMALL, "tp": 4, "pp": 2, "dp": 2, "vpp": 2,
            "sp": True, "global_batch": 16, "distributed_optimizer": True}
    ds = simulate(two_nodes, spec, "nccl")
    assert ds.attrs["layout"] == ("TP 4 (SP) x PP 2 (2 virtual stages) x DP 2 (ZeRO-1); "
                                  "4 micro-batches of 2 x 128 tokens per pipeline")
    path = tmp_path / "spec.yml"
    path.write_text(yaml.safe_dump({**spec, "vpp": 1, "distributed_optimizer": False}))
    net = tmp_path / "net.yml"
    net.write_text(yaml.safe_dump({"topology": ["Switch", "Switch"], "npus_count": [8, 2],
                                   "bandwidth": [300, 25], "latency": [500, 500]}))
    assert main(["run", "--workload", str(path), "--network", str(net)]) == 0
    assert "  layout:        TP 4 (SP) x PP 2 (1F1B) x DP 2; 4 micro-batches" in \
        capsys.readouterr().out


@pytest.mark.parametrize("change, says", [
    ({"fsdp": True, "tp": 1, "dp": 16, "global_batch": 32},
     "TP 1 x PP 1 x DP 16 (FSDP); 1 micro-batch of 2 x 128 tokens per pipeline"),
    ({"fsdp": True, "fsdp_shard": 4, "tp": 1, "dp": 16, "global_batch": 64},
     "DP 16 (HSDP: 4 replicas of 4 shards); 2 micro-batches"),
    ({"experts": 8, "top_k": 2, "ep": 4, "tp": 4, "dp": 4, "micro_batches": 3},
     "TP 4 (SP) x PP 1 x DP 4; EP 4 of 8 experts, top 2; 3 micro-batches of 2 x 128 tokens"),
])
def test_the_layout_line_of_sharded_and_expert_runs(two_nodes, change, says):
    spec = {"generator": "transformer", **SMALL, **change}
    assert says in simulate(two_nodes, spec, "nccl").attrs["layout"]


def test_an_importer_s_layout_has_the_data_parallel_size_the_network_leaves():
    net = {"cluster": {"device": "h100", "nodes": 4}}
    ds = simulate(net, {"generator": "megatron", "args":
                        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                        "--seq-length 1024 --micro-batch-size 1 --global-batch-size 64 "
                        "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
                        "--vocab-size 32000 --bf16"}, "nccl")
    assert ds.attrs["layout"].startswith("TP 4 x PP 2 (1F1B) x DP 4;")
    assert "16 micro-batches of 1 x 1,024 tokens" in ds.attrs["layout"]


def test_an_mlp_width_other_than_4_hidden_is_a_gated_mlp_unless_said():
    """Without gated_mlp, Llama's widths (ffn 3.5 h; Mixtral's experts) price SwiGLU's three
    matrices, with a warning naming the width; GPT's 4 h (or no width) GeLU's two; a spec or a
    Megatron-LM command line that says so is taken as it says, without a warning."""
    import warnings

    from flowsim.errors import FlowsimWarning
    from flowsim.workload.generators.megatron import megatron_keys
    from flowsim.workload.generators.transformer_parse import parse_transformer

    llama = dict(layers=2, hidden=4096, heads=32, kv_heads=8, sequence=1024, global_batch=8)
    with pytest.warns(FlowsimWarning, match=r"spec\.yml: gated_mlp not given: ffn=14336 is "
                                            r"not 4 x hidden=16384"):
        assert parse_transformer({**llama, "ffn": 14336}, "spec.yml").gated_mlp
    with pytest.warns(FlowsimWarning, match=r"moe_ffn=14336"):
        assert parse_transformer({**llama, "experts": 8, "top_k": 2, "moe_ffn": 14336},
                                 "spec.yml").gated_mlp
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for said in (True, False):
            assert parse_transformer({**llama, "ffn": 14336, "gated_mlp": said},
                                     "spec.yml").gated_mlp is said
        assert not parse_transformer(llama, "spec.yml").gated_mlp
        assert not parse_transformer({**llama, "ffn": 16384}, "spec.yml").gated_mlp
        keys = megatron_keys(["--num-layers", "2", "--hidden-size", "4096",
                              "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
                              "--bf16"], "train.sh")
        assert keys["gated_mlp"] is False
