"""Megatron-Core's fine-grained activation offloading of the experts' modules
(``offload_modules``): which groups are copied and brought back, their bytes by closed form,
the order of the copies against the compute, the memory they free, timing bounds with a fast
and a slow host link, and what is refused."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import flowsim
from flowsim.compute import DEVICES, DeviceModel
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.graph import topological_order

NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
L, N, TOP_K, FFN, H = 4, 1024, 2, 2048, 512
#: every layer a mixture of 8 experts over 8 ranks; 2 micro-batches
MOE = dict(layers=L, hidden=H, ffn=FFN, heads=8, sequence=N, micro_batch=1, vocab=0, tp=1,
           dp=8, ep=8, experts=8, top_k=TOP_K, global_batch=16, expert_layout="folded",
           distributed_optimizer=True, overlap_grad_reduce=True, device="gb200")
#: tokens the rank's experts receive (balanced routing): its own tokens' routes
ROWS = N * TOP_K


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def _group(op):
    """A copy's pass and layer."""
    return op.name.split(".layer")[0], op.layer


def _host_ops(work, suffix):
    return [op for op in work.programs[0].ops if op.host and op.name.endswith(suffix)]


def test_every_group_but_each_forwards_last_goes_out_and_comes_back(node):
    """``moe_act``: per micro-batch FC1's 16-bit output (rows x ffn x 2 bytes) of every
    layer but the last (whose backward comes next) is copied out in the forward and back in
    the backward, the same bytes both ways; each copy back starts after the next layer's
    experts' backward and that layer's own backward waits for it; the graph is a DAG."""
    work = transformer(node, **MOE, offload_modules=["moe_act"])
    (program,) = work.programs
    out, back = _host_ops(work, ".offload"), _host_ops(work, ".reload")
    assert [op.layer for op in out] == [0, 1, 2] * 2 and [op.layer for op in back] == \
        [2, 1, 0] * 2
    assert {op.kernels[0].bytes for op in out + back} == {ROWS * FFN * 2}
    ops = {op.id: op for op in program.ops}
    for op in back:
        later = [ops[d] for d in op.deps + op.ctrl_deps if not ops[d].host]
        assert any(d.name.endswith(f"layer{op.layer + 1}.experts.dgrad") for d in later)
        own = next(o for o in program.ops if o.layer == op.layer and o.id > op.id
                   and o.name.endswith("experts.dgrad"))
        assert op.id in own.deps
    assert len(topological_order(program)) == len(program.ops)


def test_the_groups_hold_what_each_module_saves(node):
    """Bytes of one copy by closed form: ``expert_fc1`` the experts' input (one byte in
    MXFP8), ``fused_group_mlp`` that, FC1's 16-bit output and FC2's MXFP8 input, the last
    left out by ``moe_act`` recomputation; tensors under ``offload_min_elements`` stay."""
    fp8 = dict(MOE, dtype="fp8", fp8_recipe="mxfp8", device="gb200")

    def copied(**keys):
        return {op.kernels[0].bytes for op in _host_ops(transformer(node, **keys), ".offload")}

    assert copied(**fp8, offload_modules=["expert_fc1"]) == {ROWS * H}
    fused = dict(fp8, fused_grouped_mlp=True, offload_modules=["fused_group_mlp"])
    assert copied(**fused) == {ROWS * H + ROWS * FFN * 2 + ROWS * FFN}
    assert copied(**fused, recompute="selective", recompute_modules=["moe_act"]) == \
        {ROWS * H + ROWS * FFN * 2}
    assert copied(**fused, offload_min_elements=ROWS * H + 1) == {ROWS * FFN * 3}
    assert copied(**fused, offload_min_elements=ROWS * FFN + 1) == set()


def test_the_attentions_modules_make_one_group_per_layer(node):
    """``qkv_linear``, ``core_attn`` and ``attn_proj``: per layer one group of the QKV
    layer's two saved inputs (the fused norm's input and output), the attention's queries,
    keys, values and output (the projection's input, in 16 bits); ``mlp_norm`` the pre-MLP
    norm's input, whose group Megatron-Core closes after the mixture of experts. Each kind
    keeps its last group of a forward on the GPU; the groups come back in reverse order of
    the forward, each before its block's backward."""
    q = kv = H   # 8 heads of 64, as many key-value heads (tp 1)
    # (in 16 bits the projection's input is the attention's output, already counted)
    attention = 2 * N * H * 2 + N * (2 * q + 2 * kv) * 2
    work = transformer(node, **MOE, offload_modules=["qkv_linear", "core_attn", "attn_proj",
                                                     "mlp_norm", "moe_act"],
                       offload_min_elements=0)   # (these tensors are under the default)
    out = _host_ops(work, ".offload")
    kinds = [(op.layer, op.name.split(".")[-2], op.kernels[0].bytes) for op in out[:9]]
    assert kinds == [(i, kind, size) for i in range(3) for kind, size in (
        ("attention", attention), ("experts", ROWS * FFN * 2), ("mlp_norm", N * H * 2))]
    back = _host_ops(work, ".reload")
    assert [(op.layer, op.name.split(".")[-2]) for op in back[:9]] == \
        [(i, kind) for i in (2, 1, 0) for kind in ("mlp_norm", "experts", "attention")]
    (program,) = work.programs
    attention_dgrad = [op for op in program.ops if op.name.endswith("attention.dgrad")]
    for op in back:
        if op.name.endswith("attention.reload"):
            own = next(o for o in attention_dgrad if o.id > op.id and o.layer == op.layer)
            assert op.id in own.deps
    plain = transformer(node, **MOE)
    assert plain.memory["activations"] - work.memory["activations"] == pytest.approx(
        (L - 1) * (attention + N * H * 2 + ROWS * FFN * 2))
    assert len(topological_order(program)) == len(program.ops)


def test_offloaded_groups_leave_the_memory_estimate(node):
    """At the peak (the end of a forward) every offloaded group is on the host: the
    activations drop by (L - 1) copies."""
    plain = transformer(node, **MOE)
    moved = transformer(node, **MOE, offload_modules=["moe_act"])
    assert plain.memory["activations"] - moved.memory["activations"] == \
        pytest.approx((L - 1) * ROWS * FFN * 2)


def test_copies_hide_unless_the_compute_waits_for_them(node):
    """With GB200's link and no cap the copies hide: the time without offloading. Waiting
    for every copy (``offload_max_inflight: 0``) over a slow link puts each one on the
    forward's path: at least the forwards' copies more, at most every copy's."""
    plain = float(flowsim.simulate(node, transformer(node, **MOE)).time_ns)
    hidden = flowsim.simulate(node, transformer(node, **MOE, offload_modules=["moe_act"]))
    assert float(hidden.time_ns) == pytest.approx(plain, rel=1e-12)
    slow = DeviceModel(replace(DEVICES["gb200"], name="gb200_slow_host", host_gbps=1.0))
    waits = transformer(node, **MOE, offload_modules=["moe_act"], offload_max_inflight=0)
    out = _host_ops(waits, ".offload")
    copy_ns = slow.kernel_ns(out[0].kernels[0])
    base = float(flowsim.simulate(node, transformer(node, **MOE), device=slow).time_ns)
    stalled = float(flowsim.simulate(node, waits, device=slow).time_ns)
    assert base + len(out) * copy_ns <= stalled <= base + 2 * len(out) * copy_ns * 1.001


def test_a_cap_of_one_waits_for_the_copy_before(node):
    """``offload_max_inflight: 1``: after each copy the compute waits for the one before it
    in the same forward (Megatron-Core's queue is per pass), so every copy of a forward but
    its last is waited for."""
    work = transformer(node, **MOE, offload_modules=["moe_act"], offload_max_inflight=1)
    (program,) = work.programs
    out = _host_ops(work, ".offload")
    waited = {d for op in program.ops if not op.host for d in op.deps}
    assert [op.id in waited for op in out] == [True, True, False] * 2


def test_what_recomputation_and_grouped_linears_leave_out(node):
    """A checkpointed core attention (``recompute_modules: [core_attn]``) has no group of
    its own (Megatron-Core's checkpointed branch has no offloading context): the
    projection's input is copied instead. ``expert_fc1``'s inputs are one tensor per local
    expert, each held to the size limit."""
    def copied(**keys):
        return [op.kernels[0].bytes for op in _host_ops(transformer(node, **MOE, **keys),
                                                         ".offload")]

    attention = ["core_attn", "attn_proj"]
    assert set(copied(offload_modules=attention, offload_min_elements=0)) == \
        {N * (4 * H) * 2}
    assert set(copied(offload_modules=attention, offload_min_elements=0,
                      recompute="selective", recompute_modules=["core_attn"])) == {N * H * 2}
    per_expert = ROWS // 1 * H   # 8 experts on 8 ranks: one local expert
    assert copied(offload_modules=["expert_fc1"], offload_min_elements=per_expert)
    assert not copied(offload_modules=["expert_fc1"], offload_min_elements=per_expert + 1)


@pytest.mark.parametrize("keys", [
    dict(pp=2, dp=4, ep=4, global_batch=16),
    dict(pp=2, dp=4, ep=4, vpp=2, global_batch=16),
    dict(moe_a2a_overlap=True, global_batch=32)])
def test_any_schedule_brings_every_group_back_once(node, keys):
    """Under 1F1B with warm-up forwards, the interleaved schedule and combined 1F1B: every
    copy out has one copy back, which its block's backward waits for; a forward whose
    backward comes next, runs beside it or is the stage's first keeps its last group; a
    pass with nothing left to bring back brings the next pass's last group ahead of it; the
    graph is a DAG and the run finishes."""
    spec = dict(MOE, **keys, offload_modules=["moe_act"])
    work = transformer(node, **spec)
    for program in work.programs:
        ops = program.ops
        out = [op for op in ops if op.host and op.name.endswith(".offload")]
        back = [op for op in ops if op.host and op.name.endswith(".reload")]
        assert sorted(map(_group, out)) == sorted(map(_group, back))
        for op in back:
            user = next(o for o in ops if o.id > op.id and op.id in o.deps)
            assert user.name.endswith("experts.dgrad") and user.layer == op.layer
        assert len(topological_order(program)) == len(ops)
    first = work.programs[0].ops
    starts = {}
    for op in first:
        if op.pass_ == "ig" and not op.host:
            starts.setdefault(op.name.split(".layer")[0], op.id)
    if "vpp" not in keys:   # a reload issued before its own pass's backward began
        assert any(op.id < starts[op.name.split(".layer")[0]] for op in first
                   if op.host and op.name.endswith(".reload"))
    if keys.get("pp") == 2 and "vpp" not in keys:   # stage 0: F0 F1 B0 F2 B1 F3 B2 B3
        copies = Counter(_group(op)[0] for op in first
                         if op.host and op.name.endswith(".offload"))
        # the first backward's forward keeps its last of its 2 layers; the others wait
        # behind another pass and copy both
        assert copies == {"mb0": 1, "mb1": 2, "mb2": 2, "mb3": 2}
    if keys.get("moe_a2a_overlap"):   # every forward keeps its last: 3 of 4 layers each
        assert len([op for op in first if op.host and op.name.endswith(".offload")]) == \
            (L - 1) * 32 // 8
    assert float(flowsim.simulate(node, work).time_ns) > 0


def test_a_layer_kept_in_bf16_copies_its_inputs_in_bf16(node):
    """MXFP8 with the last two layers in BF16 (``bf16_layers_at_end``): the experts' saved
    input is a byte per element in an MXFP8 layer and two in a BF16 one (each layer's own
    precision; the last layer's group stays on the GPU)."""
    work = transformer(node, **MOE, dtype="fp8", fp8_recipe="mxfp8",
                       offload_modules=["expert_fc1"], bf16_layers_at_end=2,
                       offload_min_elements=0)
    sizes = {op.layer: op.kernels[0].bytes for op in _host_ops(work, ".offload")}
    assert sizes == {0: ROWS * H, 1: ROWS * H, 2: 2 * ROWS * H}


def test_the_pre_mlp_norm_is_copied_after_the_mixture_of_experts(node):
    """``mlp_norm``'s copy starts after the block's last op (Megatron-Core closes the group
    after its residual add), and the block's backward waits for it back."""
    work = transformer(node, **MOE, offload_modules=["mlp_norm"], offload_min_elements=0)
    (program,) = work.programs
    ops = {op.id: op for op in program.ops}
    for op in _host_ops(work, ".offload"):
        assert any(ops[d].name.endswith(f"layer{op.layer}.unpermute") for d in op.deps)
    for op in _host_ops(work, ".reload"):
        user = next(o for o in program.ops if o.id > op.id and op.id in o.deps)
        assert user.layer == op.layer and not user.name.endswith("experts.dgrad")


@pytest.mark.parametrize("keys, key", [
    (dict(experts=0, ep=1, top_k=0, offload_modules=["moe_act"]), "offload_modules"),
    (dict(offload_modules=["fused_group_mlp"]), "'fused_grouped_mlp': expected true"),
    (dict(dtype="fp8", fp8_recipe="mxfp8", fused_grouped_mlp=True,
          offload_modules=["moe_act"]), "offload_modules"),
    (dict(offload_modules=["attn_proj"]), "offload_modules"),
    (dict(offload_modules=["moe_act"], recompute="selective", recompute_modules=["moe"]),
     "offload_modules"),
    (dict(offload_modules=["flash"]), "offload_modules"),
    (dict(offload_modules=["moe_act"], recompute="full"), "offload_modules"),
    (dict(offload_modules=["moe_act"], cpu_offload_layers=1), "offload_modules"),
    (dict(offload_max_inflight=1), "offload_max_inflight"),
    (dict(offload_modules=["moe_act"], offload_min_elements=-1), "offload_min_elements")])
def test_bad_offloading_names_the_key(node, keys, key):
    with pytest.raises(ConfigError, match=key):
        transformer(node, **{**MOE, **keys})
