"""LoRA fine-tuning (``lora_rank``, ``lora_targets``) and packed sequences
(``document_tokens``). Checked by closed forms on the generated kernels and collectives (the
adapters' GEMMs and parameters, no base weight gradient, per-document attention), by the
memory estimate, and by their bad specs."""

from __future__ import annotations

from collections import Counter

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Attention, Elementwise, Gemm

#: 8 NPUs of one node
NET = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
H, FFN, HEADS, KV, SEQ, LAYERS, VOCAB, RANK = 256, 512, 8, 2, 256, 2, 1024, 16
DENSE = dict(layers=LAYERS, hidden=H, ffn=FFN, heads=HEADS, kv_heads=KV, sequence=SEQ,
             vocab=VOCAB, micro_batch=1, dp=8, global_batch=16, gated_mlp=True,
             tied_embeddings=False, distributed_optimizer=True, overlap_grad_reduce=True)
HEAD_DIM = H // HEADS
QKV = H + 2 * KV * HEAD_DIM   # the QKV layer's output width
#: (in, out) of each layer LoRA can adapt
WIDTHS = {"linear_qkv": (H, QKV), "linear_proj": (H, H), "linear_fc1": (H, 2 * FFN),
          "linear_fc2": (FFN, H)}


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _gemms(workload) -> list[Gemm]:
    return [k for op in workload.programs[0].ops if op.kind == "compute"
            for k in op.kernels if isinstance(k, Gemm)]


def _grad_bytes(workload) -> int:
    return sum(op.size for op in workload.programs[0].ops
               if op.kind == "collective" and "grads" in op.name)


@pytest.mark.parametrize("targets", [list(WIDTHS), ["linear_qkv"], ["linear_fc1", "linear_fc2"]])
def test_adapters_replace_the_weight_gradients(net, targets):
    """Per layer and micro-batch the base GEMMs' forward and data gradient stay; the base
    weight gradients (and the output layer's) go; each adapter of rank r on a k-in,
    width-out layer adds 2 forward, 2 data-gradient and 2 weight-gradient GEMMs whose FLOPs
    are 2 n r (k + width) each pair."""
    full = transformer(net, **DENSE)
    lora = transformer(net, **DENSE, lora_rank=RANK, lora_targets=targets)
    micro = DENSE["global_batch"] // DENSE["dp"]
    n = SEQ   # tokens of a micro-batch
    base_fwd_dgrad = 2 * 2 * n * sum(k * w for k, w in WIDTHS.values())
    output_layer = 2 * n * H * VOCAB   # its forward, data and weight gradient each
    adapters = 3 * sum(2 * n * RANK * (k + w) for t, (k, w) in WIDTHS.items() if t in targets)
    flops = [sum(g.flops for g in _gemms(w)) for w in (full, lora)]
    assert flops[0] == pytest.approx(micro * LAYERS * 1.5 * base_fwd_dgrad + micro * 3
                                     * output_layer)
    assert flops[1] == pytest.approx(micro * (LAYERS * (base_fwd_dgrad + adapters)
                                              + 2 * output_layer))
    # every adapter's GEMMs are rank-wide on one side
    extra = [g for g in _gemms(lora) if RANK in (g.m, g.n, g.k)]
    assert len(extra) == micro * LAYERS * 6 * len(targets)


def test_only_the_adapters_are_reduced_and_stepped(net):
    """The data-parallel gradient reduction moves the adapters' gradients (FP32: 4 bytes
    each), the frozen weights none; the optimizer steps the adapters' shard."""
    lora = transformer(net, **DENSE, lora_rank=RANK)
    adapters = LAYERS * sum(RANK * (k + w) for k, w in WIDTHS.values())
    assert _grad_bytes(lora) == pytest.approx(4 * adapters, abs=4 * LAYERS)
    steps = [k for op in lora.programs[0].ops if op.kind == "compute"
             for k in op.kernels if isinstance(k, Elementwise) and k.name == "optimizer"]
    assert sum(k.bytes for k in steps) == pytest.approx(30 * adapters / DENSE["dp"], rel=1e-6)


@pytest.mark.parametrize("tp", [1, 2])
def test_lora_memory_keeps_the_frozen_weights(net, tp):
    """Weights: the rank's share of the whole model plus its share of the adapters (a t-th
    over TP); gradients and optimizer states: the adapters' alone."""
    spec = {"generator": "transformer", **DENSE, "tp": tp, "dp": DENSE["dp"] // tp}
    full = flowsim.simulate(net, spec, "nccl").attrs
    lora = flowsim.simulate(net, {**spec, "lora_rank": RANK}, "nccl").attrs
    adapters = LAYERS * sum(RANK * (k + w) for k, w in WIDTHS.values()) / tp
    gib = 2 ** 30
    assert lora["memory_weights_gib"] == pytest.approx(full["memory_weights_gib"]
                                                       + 2 * adapters / gib)
    assert lora["memory_gradients_gib"] == pytest.approx(4 * adapters / gib)
    assert lora["memory_optimizer_gib"] == pytest.approx(12 * adapters / spec["dp"] / gib)


def test_a_qkv_adapter_shortens_the_step(net):
    """Without the base weight gradients the step is shorter than full training's, with
    the QKV adapter alone (its kernels are small beside the saved GEMMs)."""
    spec = {"generator": "transformer", **DENSE, "hidden": 1024, "ffn": 4096}
    times = [float(flowsim.simulate(net, {**spec, **extra}, "nccl").time_ns)
             for extra in ({}, {"lora_rank": RANK, "lora_targets": ["linear_qkv"]})]
    assert times[1] < times[0]


@pytest.mark.parametrize("doc", [SEQ, 64, 100])
def test_packed_documents_attend_to_themselves(net, doc):
    """Attention over packed documents does the FLOPs of each document's own causal
    attention: ``s // d`` documents of ``d`` tokens and one of the rest."""
    plain = transformer(net, **DENSE)
    packed = transformer(net, **DENSE, document_tokens=doc)

    def attention(w):
        return sum(k.flops for op in w.programs[0].ops if op.kind == "compute"
                   for k in op.kernels if isinstance(k, Attention))
    docs, rest = divmod(SEQ, doc)
    share = (docs * doc ** 2 + rest ** 2) / SEQ ** 2
    assert attention(packed) == pytest.approx(attention(plain) * share)


#: the row-parallel layers (input split over TP); the others are column-parallel
ROW = ("linear_proj", "linear_fc2")
TP = 2
TP_DENSE = {**DENSE, "tp": TP, "dp": DENSE["dp"] // TP}


def _adapter_gemms(workload) -> list[Gemm]:
    """The adapters' GEMMs: rank-wide (``r`` or ``r / t``) on one side."""
    return [g for g in _gemms(workload) if {RANK, RANK // TP} & {g.m, g.n, g.k}]


@pytest.mark.parametrize("sp", [False, True])
def test_tp_splits_the_adapters(net, sp):
    """Over TP each rank runs a t-th of every adapter's FLOPs (A split by its rank or its
    input, B by its output), and reduces a t-th of the adapters' gradients."""
    lora = transformer(net, **TP_DENSE, sp=sp, lora_rank=RANK)
    micro = DENSE["global_batch"] // TP_DENSE["dp"]
    flops = 3 * sum(2 * SEQ * RANK * (k + w) for k, w in WIDTHS.values()) / TP
    assert sum(g.flops for g in _adapter_gemms(lora)) == pytest.approx(micro * LAYERS * flops)
    adapters = LAYERS * sum(RANK * (k + w) for k, w in WIDTHS.values()) / TP
    assert _grad_bytes(lora) == pytest.approx(4 * adapters, abs=4 * LAYERS)


def _expected_exchanges(targets: list[str], sp: bool, ub: bool) -> Counter:
    """Per layer and micro-batch, the adapters' own TP collectives: (kind, bytes per NPU)."""
    n, out = SEQ, Counter()
    for target in targets:
        k = WIDTHS[target][0]
        if target in ROW:   # A's output all-reduced, B's gathered; backward: B's input
            out.update([("all_reduce", 2 * n * RANK), ("all_gather", 2 * n * H // TP),
                        ("all_reduce", 2 * n * RANK)])
            if sp:   # the sequence shard's output gradient gathered
                out[("all_gather", 2 * n // TP * H)] += 1
        else:   # A's output gathered; backward: B's input, and A's without SP
            out.update([("all_gather", 2 * n * RANK // TP), ("all_reduce", 2 * n * RANK)])
            if not sp:
                out[("all_reduce", 2 * n * k)] += 1
            if ub:   # its input gathered by itself, and its gradient scattered back
                out.update([("all_gather", 2 * n // TP * k), ("reduce_scatter", 2 * n * k)])
    return out


@pytest.mark.parametrize("sp, ub", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("targets", [list(WIDTHS), ["linear_qkv"], ["linear_proj"]])
def test_tp_adapters_exchange_what_their_layers_split(net, sp, ub, targets):
    """The adapters' collectives are ParallelLinearAdapter's, in kind and size (under
    userbuffers a column-parallel adapter gathers its input itself); each sits between two
    compute ops of its layer: it waits for the one before it, and the one after it waits
    for it."""
    lora = transformer(net, **TP_DENSE, sp=sp, tp_comm_overlap=ub, lora_rank=RANK,
                       lora_targets=targets)
    ops = lora.programs[0].ops
    mine = [op for op in ops if op.kind == "collective" and ".lora_" in op.name]
    micro = DENSE["global_batch"] // TP_DENSE["dp"]
    expected = _expected_exchanges(targets, sp, ub)
    assert Counter((op.collective, op.size) for op in mine) == Counter(
        {key: micro * LAYERS * count for key, count in expected.items()})
    readers = Counter(d for op in ops if op.kind == "compute" for d in op.deps)
    for op in mine:
        (before,) = op.deps
        assert ops[before].kind == "compute" and ops[before].layer == op.layer
        assert readers[op.id] == 1


def test_frozen_layers_gather_no_input_for_a_weight_gradient(net):
    """With sequence parallelism a trained column-parallel layer gathers its input again in
    the backward for its weight gradient; a frozen one does not (Transformer Engine's
    ``ln_out_needs_gather`` asks for a weight that requires a gradient)."""
    def regathers(**extra):
        ops = transformer(net, **TP_DENSE, sp=True, **extra).programs[0].ops
        return sum(op.kind == "collective" and op.name.endswith(".input.all_gather")
                   for op in ops)
    assert regathers() > 0 and regathers(tp_comm_overlap=True) > 0
    assert regathers(lora_rank=RANK) == regathers(lora_rank=RANK, tp_comm_overlap=True) == 0


def test_the_frozen_embedding_gathers_no_gradient(net):
    """With SP the embedding's weight gradient needs its output gradient gathered; frozen
    (LoRA), it has none to compute."""
    def gathers(**extra):
        ops = transformer(net, **TP_DENSE, sp=True, **extra).programs[0].ops
        return sum(op.name.endswith("embedding.all_gather") for op in ops)
    assert gathers() > 0 and gathers(lora_rank=RANK) == 0


def test_an_adapted_layer_gathers_its_input_in_16_bits(net):
    """In FP8 training with SP, Transformer Engine gathers a layer's input cast to FP8, but
    an adapted layer returns its norm output to the adapter: gathered in 16 bits, then
    cast. QKV adapted, FC1 not: their forward all-gathers move 2 and 1 bytes an element."""
    ops = transformer(net, **TP_DENSE, sp=True, dtype="fp8", lora_rank=RANK,
                      lora_targets=["linear_qkv"]).programs[0].ops
    sizes = {op.name.split(".")[-2]: op.size for op in ops
             if op.kind == "collective" and op.pass_ == "fwd" and op.name.startswith("mb0.")
             and op.name.endswith(("attention.all_gather", "mlp.all_gather"))}
    shard = SEQ // TP * H
    assert sizes == {"attention": 2 * shard, "mlp": shard}


def test_a_frozen_layer_gathers_one_layout(net):
    """Under MXFP8 with SP Transformer Engine gathers both layouts of a trained layer's
    input (its weight gradient reads the column-wise one); a frozen layer's, one."""
    def mlp_gather(**extra):
        ops = transformer(net, **TP_DENSE, sp=True, dtype="fp8", fp8_recipe="mxfp8",
                          **extra).programs[0].ops
        return next(op.size for op in ops if op.name == "mb0.layer0.mlp.all_gather")
    assert mlp_gather() == 2 * mlp_gather(lora_rank=RANK, lora_targets=["linear_qkv"])


def test_row_parallel_adapters_take_any_rank(net):
    """Only a column-parallel layer's adapter splits its rank over TP: an odd rank on the
    projection alone is a layout Megatron-Bridge runs."""
    lora = transformer(net, **TP_DENSE, sp=True, lora_rank=RANK + 1,
                       lora_targets=["linear_proj"])
    assert any(RANK + 1 in (g.m, g.n, g.k) for g in _gemms(lora))


def test_userbuffers_leave_an_adapted_layer_s_gather_to_nccl(net):
    """Under userbuffers an adapted QKV layer returns its norm output, and Transformer
    Engine then gathers its input with NCCL instead of the ring exchange; FC1, not adapted,
    keeps its ring exchange (a chunked GEMM beside the all-gather)."""
    ops = transformer(net, **TP_DENSE, sp=True, tp_comm_overlap=True, lora_rank=RANK,
                      lora_targets=["linear_qkv"]).programs[0].ops
    rings = {op.name.split(".")[-2] for op in ops if op.name.endswith(".last_chunk")
             and op.pass_ == "fwd"}
    assert rings == {"fc1"}


@pytest.mark.parametrize("extra, key", [
    (dict(lora_rank=RANK + 1, tp=2, dp=4, sp=True), "lora_rank"),
    (dict(lora_rank=RANK, experts=8, top_k=2), "experts"),
    (dict(lora_rank=RANK, lora_targets=["linear_qkv", "router"]), r"lora_targets\[1\]"),
    (dict(lora_rank=RANK, lora_targets=[]), "lora_targets"),
    (dict(lora_rank=RANK, fsdp=True, distributed_optimizer=False), "fsdp"),
    (dict(lora_targets=["linear_qkv"]), "lora_targets"),   # without lora_rank
    (dict(document_tokens=SEQ + 1), "document_tokens"),
    (dict(document_tokens=64, cp=2, dp=4), "document_tokens"),
    (dict(document_tokens=64, attention="unfused"), "document_tokens"),
])
def test_what_is_not_modelled_is_refused(extra, key):
    assert_spec_refused({**DENSE, **extra}, key)


def test_the_training_workloads_page_prints_what_it_says():
    """The LoRA command of the Training workloads page prints the time it quotes, and full
    fine-tuning and the unpacked step the times it compares them with."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    page = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = page.index("### Fine-tuning: LoRA and packed sequences")
    block = page[page.index("flowsim run", start): page.index("```", page.index("flowsim run",
                                                                                 start))]
    args = shlex.split(block.replace("\\\n", " "))[2:]   # as the shell reads it
    said = re.search(r"prints ([\d.]+) s \(([\d,]+) tokens per second per GPU\); full "
                     r"fine-tuning of the same packed\s+batch takes ([\d.]+) s, and the same "
                     r"step over unpacked sequences ([\d.]+) s", page[start:])
    pairs = [args[i:i + 2] for i in range(0, len(args), 2)]   # --workload x, --set k=v, ...
    lora_only = ("workload.lora_rank=16", "workload.lora_targets=[linear_qkv]")
    full = [p for p in pairs if p[1] not in lora_only]
    variants = (pairs, full, [p for p in full if "document_tokens" not in p[1]])
    times = []
    for variant in variants:
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json",
                              *sum(variant, [])],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        times.append(json.loads(out)["time_ns"] / 1e9)
    assert [f"{t:.3f}" for t in times] == [said.group(1), said.group(3), said.group(4)]
    assert f"{32 * 4096 / 8 / times[0]:,.0f}" == said.group(2)


def test_pipelined_lora_gathers_the_adapters_alone(net):
    """Under pipeline parallelism with interleaving and the distributed optimizer's
    overlapped gathers, each stage's parameter all-gathers move its own layers' adapters in
    16 bits (each rank its shard of them), and nothing of the frozen embedding or output
    layer."""
    spec = dict(DENSE, layers=4, pp=2, vpp=2, dp=4, global_batch=16,
                overlap_param_gather=True, lora_rank=RANK)
    lora = transformer(net, **spec)
    per_layer = sum(RANK * (k + w) for k, w in WIDTHS.values())
    for program in lora.programs:
        gathered = sum(op.size for op in program.ops
                       if op.kind == "collective" and op.collective == "all_gather"
                       and "params" in op.name)
        assert gathered == pytest.approx(2 * per_layer * spec["layers"] / spec["pp"]
                                         / spec["dp"], abs=2 * spec["layers"])


@pytest.mark.parametrize("recipe, per_element", [
    ("mxfp8", 2 + 1 + 1 / 32),       # read 16 bits, write one MXFP8 copy and its scales
    ("tensorwise", 2 + 1),           # read 16 bits, write one FP8 copy, no transpose
])
def test_frozen_layers_cast_one_layout(net, recipe, per_element):
    """Under LoRA a linear layer's FP8 casts write the one layout its data GEMM reads;
    without LoRA, both (MXFP8's two copies, Hopper's transpose)."""
    from flowsim.workload.kernels import Quantize, quantize_bytes

    def casts(workload):
        return [k for op in workload.programs[0].ops if op.kind == "compute"
                for k in op.kernels if isinstance(k, Quantize)]
    spec = dict(DENSE, dtype="fp8", fp8_recipe=recipe)
    frozen = casts(transformer(net, **spec, lora_rank=RANK))
    trained = casts(transformer(net, **spec))
    assert frozen and {k.layouts for k in frozen} == {1}
    assert {k.layouts for k in trained} == {2}
    for k in frozen:
        assert quantize_bytes(k, any_layout=False) == pytest.approx(per_element * k.elements)


@pytest.mark.parametrize("tp", [1, TP])
@pytest.mark.parametrize("targets", [list(WIDTHS), ["linear_qkv"], ["linear_proj"]])
def test_frozen_layers_keep_no_input_for_a_weight_gradient(net, targets, tp):
    """Per layer and micro-batch, LoRA's activations are full training's less the inputs
    kept only for a frozen layer's weight gradient: QKV's and FC1's (h wide, a sequence
    shard with SP) and FC2's (ffn / t wide), each unless the layer has an adapter; with SP
    an adapter on QKV or FC1 keeps that input whole (the gathered norm output it reads)."""
    spec = {"generator": "transformer", **DENSE, "tp": tp, "dp": DENSE["dp"] // tp,
            "sp": tp > 1}
    full = flowsim.simulate(net, spec, "nccl").attrs["memory_activations_gib"]
    lora = flowsim.simulate(net, {**spec, "lora_rank": RANK, "lora_targets": targets},
                            "nccl").attrs["memory_activations_gib"]
    shard = SEQ // tp
    change = -SEQ * FFN // tp if "linear_fc2" not in targets else 0
    for target in ("linear_qkv", "linear_fc1"):
        change += (SEQ - shard) * H if target in targets else -shard * H
    # one micro-batch in flight (no pipeline): every layer's activations once
    assert (lora - full) * 2 ** 30 == pytest.approx(2 * change * LAYERS)


def test_lora_model_flops_count_what_still_runs(net):
    """Megatron-LM's count with the weights frozen: every weight GEMM twice (forward and data
    gradient) instead of three times, the attention's score matmuls three times as before,
    whatever the adapters' targets."""
    full = transformer(net, **DENSE).model_flops
    tokens = DENSE["global_batch"] * SEQ
    score_flops = 12 * tokens * LAYERS * SEQ * H   # 12 B s L h^2 (s/h)(q/h), q = h
    for targets in (list(WIDTHS), ["linear_qkv"]):
        lora = transformer(net, **DENSE, lora_rank=RANK, lora_targets=targets).model_flops
        assert lora == pytest.approx((full - score_flops) * 2 / 3 + score_flops)


def test_a_target_named_twice_is_one_adapter():
    """``lora_targets`` lists layers: naming one twice adapts it once (and says so once)."""
    from flowsim.workload.generators.transformer import layout_text
    from flowsim.workload.generators.transformer_parse import parse_transformer

    spec = parse_transformer({**DENSE, "lora_rank": RANK,
                              "lora_targets": ["linear_fc2", "linear_qkv", "linear_fc2"]}, "t")
    assert spec.lora_targets == ("linear_fc2", "linear_qkv")
    assert "LoRA rank 16 on linear_fc2, linear_qkv;" in layout_text(spec)
