"""FP8 training as Transformer Engine and Megatron-LM run it: the layers' linear GEMMs in FP8
with a cast of each operand under the scaling recipe, the output layer and the router in 16
bits; checked by closed forms on the generated kernels and their prices."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Gemm, Quantize, quantize_bytes

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
H, F, HEADS, SEQ, LAYERS, MICRO = 256, 1024, 8, 128, 2, 4


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _kernels(workload, *, kind: type | None = None, op_name: str = ""):
    """Kernels of the compute ops whose name holds ``op_name`` (and of type ``kind``)."""
    return [k for op in workload.programs[0].ops if op.kind == "compute"
            and op_name in op.name for k in op.kernels if kind is None or isinstance(k, kind)]


def _spec(**extra):
    return dict(layers=LAYERS, hidden=H, ffn=F, heads=HEADS, sequence=SEQ, micro_batch=1,
                vocab=1000, tp=2, dp=8, global_batch=8 * MICRO, sp=True, **extra)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "mxfp8", "nvfp4"])
def test_every_fp8_gemm_operand_is_cast_once_under_the_recipe(net, gated, recipe):
    """Per layer and micro-batch, one cast of each forward input (QKV, projection, FC1, FC2)
    and each incoming gradient (their outputs' gradients), under the run's recipe."""
    w = transformer(net, **_spec(dtype="fp8", fp8_recipe=recipe, gated_mlp=gated))
    n, q, f = SEQ, H // 2, F // 2
    keys_values = 2 * (H // HEADS) * (HEADS // 2)   # K and V of the rank's 4 heads
    fc1 = (2 if gated else 1) * f
    forward = n * (H + q + H + f)
    backward = n * ((q + keys_values) + H + fc1 + H)
    casts = _kernels(w, kind=Quantize)
    assert sum(k.elements for k in casts) == (forward + backward) * LAYERS * MICRO
    assert {k.recipe for k in casts} == {recipe}
    assert not _kernels(transformer(net, **_spec(gated_mlp=gated)), kind=Quantize)


@pytest.mark.parametrize("recipe, hopper, blackwell", [
    ("delayed", 2 + 1 + 1, 2 + 1),            # read; FP8 copy (+ its transpose on Hopper)
    ("tensorwise", 2 + 1 + 1, 2 + 1),         # the amax found by the operand's producer
    ("mxfp8", None, 2 + 2 * (1 + 1 / 32)),    # both layouts, one E8M0 scale per 32
    ("nvfp4", None, 2 + 2 + 2 * (0.5 + 1 / 16))])   # an amax pass; both layouts, E4M3 per 16
def test_casts_move_the_bytes_of_their_recipe_on_each_device(recipe, hopper, blackwell):
    """A cast is memory-bound: its bytes per element at the device's memory rate and a
    launch; Blackwell writes no transpose; MXFP8 and NVFP4 need Blackwell."""
    from flowsim.compute.quantize import quantize_ns
    from flowsim.errors import ConfigError

    elements = 1 << 24
    cast = Quantize(elements, recipe)
    for preset, per_element in (("h100", hopper), ("b200", blackwell), ("gb300", blackwell)):
        dev = flowsim.compute.device(preset)
        if per_element is None:
            with pytest.raises(ConfigError, match="fp8_recipe.*Blackwell"):
                quantize_ns(dev, cast)
            continue
        expected = per_element * elements / (dev.memory_gbps * dev.memory_efficiency) \
            + dev.launch_us * 1e3
        assert quantize_ns(dev, cast) == pytest.approx(expected, rel=1e-12)
    assert cast.bytes == quantize_bytes(cast, any_layout=False)   # the nominal, Hopper's


def test_mxfp8_is_fp8_with_its_recipe_and_gathers_parameters_in_16_bits(net):
    """``dtype: mxfp8`` is FP8 under the MXFP8 recipe; with ``fp8_param_gather`` its
    parameters are gathered in 16 bits (Megatron-Core casts them after), tensor-scaled FP8's
    layers' weights in one byte."""
    def gathered(**extra):
        w = transformer(net, **_spec(**{"distributed_optimizer": True,
                                        "fp8_param_gather": True, **extra}))
        return sum(op.size for op in w.programs[0].ops
                   if op.kind == "collective" and op.collective == "all_gather"
                   and "params" in op.name)

    mx = transformer(net, **_spec(dtype="mxfp8"))
    assert {k.recipe for k in _kernels(mx, kind=Quantize)} == {"mxfp8"}
    assert {k.dtype for k in _kernels(mx, op_name="attention", kind=Gemm)} == {"fp8"}
    sixteen = gathered(dtype="fp8", fp8_recipe="mxfp8")
    assert sixteen > gathered(dtype="fp8") > 0
    assert sixteen == gathered(dtype="bf16", fp8_param_gather=False)


def test_output_layer_and_router_stay_16_bit(net):
    w = transformer(net, **_spec(dtype="fp8", experts=4, top_k=2, ep=2))
    logits = _kernels(w, op_name="logits", kind=Gemm)
    router = _kernels(w, op_name="router", kind=Gemm)
    layer = _kernels(w, op_name="attention", kind=Gemm)
    assert len(logits) == 3 * MICRO and {k.dtype for k in logits} == {"bf16"}
    assert router and {k.dtype for k in router} == {"bf16"}
    assert layer and {k.dtype for k in layer} == {"fp8"}


def test_context_parallel_qkv_gradient_casts_after_the_key_value_reduction(net):
    """With cp, the QKV data gradient runs after the reduce-scatter of the key and value
    gradients; in FP8 its cast-transpose goes with it."""
    w = transformer(net, **dict(_spec(dtype="fp8"), cp=2, dp=4, global_batch=4 * MICRO))
    (op, *_) = [op for op in w.programs[0].ops if op.name.endswith("layer0.attention.dgrad.qkv")]
    assert [type(k) for k in op.kernels] == [Quantize, Gemm]
    assert op.kernels[1].dtype == "fp8"



@pytest.mark.parametrize("preset, ratio", [("h100", (1402.6 / 1978.9) / (794.5 / 989.4)),
                                           ("h200", (1453.4 / 1978.9) / (794.5 / 989.4)),
                                           ("gb200", (3615.6 / 5000.0) / (1822.0 / 2500.0)),
                                           ("gb300", (3615.6 / 5000.0) / (1822.0 / 2500.0)),
                                           ("b300", (3353.3 / 4500.0) / (1769.0 / 2250.0)),
                                           ("a100", 1.0)])
def test_fp8_gemms_reach_the_published_fraction_of_their_peak(preset, ratio):
    """A compute-bound FP8 GEMM runs at its peak times the BF16 GEMM's fraction times the
    ratio of the two best measured fractions (ml-engineering's MAMF tables, same software);
    A100 has no FP8 and runs it at its 16-bit rate."""
    from flowsim.compute.gemm import gemm_ns

    dev = flowsim.compute.device(preset)
    launch = dev.launch_us * 1e3
    bf16, fp8 = (gemm_ns(dev, Gemm(16384, 16384, 16384, 1, dtype)) - launch
                 for dtype in ("bf16", "fp8"))
    speedup = dev.peak("fp8") / dev.peak("bf16") * round(ratio, 3)
    assert bf16 / fp8 == pytest.approx(speedup, rel=1e-9)


@pytest.mark.parametrize("tp_comm_overlap", [False, True])
def test_fp8_layers_gather_one_byte_per_element_and_reduce_in_16_bits(net, tp_comm_overlap):
    """Transformer Engine casts to FP8 before it all-gathers (the layer norm's output
    forward and again for the weight gradient, the output gradient backward), so a layer's
    all-gathers move half the BF16 bytes; without userbuffers its reduce-scatters stay 16-bit,
    and the output layer (plain Megatron) gathers 16 bits, forward and again backward."""
    def sizes(dtype):
        w = transformer(net, **_spec(dtype=dtype, tp_comm_overlap=tp_comm_overlap))
        ops = [op for op in w.programs[0].ops if op.kind == "collective"
               and op.collective in ("all_gather", "reduce_scatter")
               and ".layer" in op.name and "grads" not in op.name]
        return {(op.name, op.collective): op.size for op in ops}, w
    bf16, _ = sizes("bf16")
    fp8, w = sizes("fp8")
    assert bf16.keys() == fp8.keys()
    for key, size in bf16.items():
        if key[1] == "all_gather":
            assert fp8[key] * 2 == size
        elif not tp_comm_overlap:
            assert fp8[key] == size
    logits = [op for op in w.programs[0].ops if op.name.endswith(
        ("logits.all_gather", "logits.dgrad.input.all_gather"))]
    assert {op.pass_ for op in logits} == {"fwd", "ig"}
    assert all(op.size == SEQ * H * 2 // 2 for op in logits)


def test_mxfp8_weights_are_kept_at_16_bit_size_and_fsdp_gathered_in_mxfp8(net):
    """MXFP8 keeps its weights in both layouts and the distributed optimizer gathers them in
    16 bits: the memory estimate matches BF16's, where tensor-scaled FP8 with
    ``fp8_param_gather`` saves a byte per layer weight. FSDP gathers the layout each pass
    needs, a byte and a 32-element block's scale byte per weight (Transformer Engine's
    ``MXFP8Tensor.fsdp_pre_all_gather``, Megatron-FSDP's row- and column-wise buffers),
    and both layouts where the forward's gather serves the backward too."""
    def build(**extra):
        return transformer(net, **_spec(**{"distributed_optimizer": True,
                                           "fp8_param_gather": True, **extra}))

    def fsdp_gathered(**extra):
        w = transformer(net, **_spec(**{"fsdp": True, "fp8_param_gather": True, **extra}))
        return sum(op.size for op in w.programs[0].ops
                   if op.kind == "collective" and op.collective == "all_gather"
                   and "params" in op.name)

    weights = {recipe: build(dtype="fp8", fp8_recipe=recipe).memory["weights"]
               for recipe in ("delayed", "mxfp8")}
    sixteen = build(dtype="bf16", fp8_param_gather=False).memory["weights"]
    assert weights["mxfp8"] == sixteen > weights["delayed"]
    sixteen, tensor = fsdp_gathered(dtype="bf16", fp8_param_gather=False), \
        fsdp_gathered(dtype="fp8")
    mx = fsdp_gathered(dtype="fp8", fp8_recipe="mxfp8")
    # per layer weight: 2 bytes, 1 byte, 1 + 1/32 bytes
    assert mx - tensor == pytest.approx((sixteen - tensor) / 32, rel=1e-3)
    # kept from the forward to the backward: one gather of both layouts instead of two of
    # one (about the same bytes: the norms' 16 bits are gathered once instead of twice)
    both = fsdp_gathered(dtype="fp8", fp8_recipe="mxfp8", fsdp_reshard="after_backward")
    assert both == pytest.approx(mx, rel=1e-2)


def test_a_device_model_prices_a_cast_by_its_generation():
    """Through :class:`DeviceModel`: a B200 cast costs its 3 bytes per element, an H100
    one 4, each at its memory rate and the device's sustained fraction."""
    from flowsim.compute import DeviceModel

    cast = Quantize(1 << 24, "delayed")
    for preset, per_element in (("h100", 4), ("b200", 3)):
        model = DeviceModel(preset)
        dev = model.device
        expected = (per_element * cast.elements / (dev.memory_gbps * dev.memory_efficiency)
                    + dev.launch_us * 1e3) / model.sustained
        assert model.kernel_ns(cast) == pytest.approx(expected, rel=1e-12)


def test_mxfp8_on_hopper_is_one_error_naming_the_workload_file(tmp_path):
    """The device comes from the network at run time; the refusal names the workload's
    file, the key, what it needs and the value, under either network model (the analytical
    one prices ops in its compiled loop's packer, the flow one in its engine)."""
    import yaml

    from flowsim.errors import ConfigError

    path = tmp_path / "spec.yml"
    path.write_text(yaml.safe_dump({"generator": "transformer", **_spec(dtype="mxfp8")}))
    for device, model in (("h100", "analytical"), ("a100", "flow")):
        network = {"cluster": {"device": device, "nodes": 2, "gpus_per_node": 8}}
        with pytest.raises(ConfigError) as err:
            flowsim.simulate(network, str(path), "nccl", model=model)
        message = str(err.value)
        assert message.startswith(str(path)) and "fp8_recipe" in message
        assert "Blackwell" in message and "'mxfp8'" in message


def test_nvfp4_runs_the_layers_gemms_in_fp4_at_fp8_s_fraction_of_the_fp4_peak(net):
    """``dtype: nvfp4``: the layers' GEMMs in FP4 (the output layer and the router in 16
    bits), each at the device's FP4 peak times FP8's fraction of its peak (no FP4 GEMM
    measurement is published); a GPU without FP4 tensor cores refuses it in one line."""
    from flowsim.compute.gemm import gemm_ns
    from flowsim.errors import ConfigError

    w = transformer(net, **_spec(dtype="nvfp4", experts=4, top_k=2, ep=2))
    assert {k.dtype for k in _kernels(w, op_name="attention", kind=Gemm)} == {"fp4"}
    assert {k.dtype for k in _kernels(w, op_name="logits", kind=Gemm)} == {"bf16"}
    assert {k.dtype for k in _kernels(w, op_name="router", kind=Gemm)} == {"bf16"}
    assert {k.recipe for k in _kernels(w, kind=Quantize)} == {"nvfp4"}
    for preset, fp4 in (("gb200", 10000.0), ("b200", 9000.0), ("gb300", 15000.0),
                        ("b300", 12600.0)):
        dev = flowsim.compute.device(preset)
        launch = dev.launch_us * 1e3
        fp8, fp4_ns = (gemm_ns(dev, Gemm(16384, 16384, 16384, 1, dtype)) - launch
                       for dtype in ("fp8", "fp4"))
        assert fp8 / fp4_ns == pytest.approx(fp4 / dict(dev.peak_tflops)["fp8"], rel=1e-9)
    with pytest.raises(ConfigError, match="'dtype'.*FP4 needs Blackwell"):
        gemm_ns(flowsim.compute.device("h100"), Gemm(1024, 1024, 1024, 1, "fp4"))


def test_nvfp4_gathers_half_a_byte_and_a_scale_per_element(net):
    """Sequence parallelism's all-gathers move NVFP4's packed data and its E4M3 block scales
    (half of FP8's bytes and one per 16 elements), in both layouts where Transformer Engine
    needs both (the forward's input, the output gradient; the weight gradient's re-gathered
    input in one), as MXFP8's, where tensor-scaled FP8 gathers one and transposes after;
    ``fp8_param_gather`` (Megatron-LM's ``--fp4-param-gather``) gathers the layers' weights
    packed too."""
    def gathers(**extra):
        w = transformer(net, **_spec(**extra))
        return {op.name: op.size for op in w.programs[0].ops
                if op.kind == "collective" and op.collective == "all_gather"
                and ".layer" in op.name}

    fp8, fp4, mx = gathers(dtype="fp8"), gathers(dtype="nvfp4"), gathers(dtype="mxfp8")
    assert fp8.keys() == fp4.keys() == mx.keys() and fp8
    for name, size in fp8.items():
        layouts = 1 if name.endswith("input.all_gather") else 2
        assert fp4[name] == layouts * int(size * (0.5 + 1 / 16))
        assert mx[name] == layouts * size
    assert {n for n in fp8 if n.endswith("input.all_gather")} and \
        {n for n in fp8 if not n.endswith("input.all_gather")}

    def params(**extra):
        w = transformer(net, **_spec(distributed_optimizer=True, **extra))
        return sum(op.size for op in w.programs[0].ops if op.kind == "collective"
                   and op.collective == "all_gather" and "params" in op.name), w
    sixteen, _ = params(dtype="nvfp4")
    one_byte, _ = params(dtype="fp8", fp8_param_gather=True)
    packed, w = params(dtype="nvfp4", fp8_param_gather=True)
    layer_weights = sixteen - one_byte   # a byte saved per layer weight in FP8
    assert packed == pytest.approx(sixteen - (2 - 0.5625) * layer_weights, abs=4)
    assert w.memory["weights"] < transformer(net, **_spec(
        distributed_optimizer=True, dtype="nvfp4")).memory["weights"]


def test_the_workloads_page_precision_example_prints_what_it_says():
    """The Training workloads page runs the bundled Llama 3 70B step on a GB300 rack in each
    precision and quotes the step times and the NVFP4 MFU: they are flowsim's."""
    import json
    import re
    import subprocess
    import sys

    from conftest import REPO

    page = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = page.index("for d in bf16 fp8 mxfp8 nvfp4; do")
    command = page[page.index("flowsim run", start): page.index("done", start)]
    args = command.replace("\\\n", " ").split()[2:]
    times = re.search(r"prints ([\d.]+) s \(BF16\),\s+([\d.]+) s \(FP8\),\s+([\d.]+) s \(MXFP8",
                      page[start:])
    nvfp4 = re.search(r"and ([\d.]+) s\s+\(NVFP4\)", page[start:])
    mfu = re.search(r"NVFP4's here:\s+([\d.]+)%", page[start:])
    quoted = [*times.groups(), nvfp4.group(1)]
    for dtype, expected in zip(("bf16", "fp8", "mxfp8", "nvfp4"), quoted):
        out = subprocess.run(
            [sys.executable, "-m", "flowsim", "run", "--json",
             *[a.replace("$d", dtype) for a in args]],
            capture_output=True, text=True, check=True, cwd=REPO).stdout
        summary = json.loads(out)
        assert f"{summary['time_ns'] / 1e9:.2f}" == expected
        paragraph = page[start: page.index("\n\n", page.index("prints", start))]
        assert f"{summary['memory_gib']:.1f} GiB per GPU" in paragraph
        if dtype == "nvfp4":
            assert f"{100 * summary['mfu']:.1f}" == mfu.group(1)


def test_nvfp4_refusals_and_the_bytes_of_its_weights_and_latents(net):
    """NVFP4 without userbuffers (Transformer Engine has no NVFP4 path for them), one recipe
    per ``dtype`` shorthand; packed NVFP4 weights are kept in both layouts (1.125 bytes per
    element) and gathered in one (0.5625); multi-head latent attention's latents are
    gathered in NVFP4 too."""
    from flowsim.errors import ConfigError
    from flowsim.workload.generators import transformer_values as tv
    from flowsim.workload.generators.transformer_parse import parse_transformer

    with pytest.raises(ConfigError, match="'tp_comm_overlap'.*NVFP4"):
        transformer(net, **_spec(dtype="nvfp4", tp_comm_overlap=True))
    with pytest.raises(ConfigError, match="'fp8_recipe'.*nvfp4 or unset with dtype: nvfp4"):
        transformer(net, **_spec(dtype="nvfp4", fp8_recipe="mxfp8"))
    spec = parse_transformer(_spec(dtype="nvfp4", fp8_param_gather=True,
                                   distributed_optimizer=True), "test")
    assert tv.weight_bytes(spec) == 0.5625 and tv.weight_bytes(spec, kept=True) == 1.125
    assert tv.gathered_bytes(spec) == 0.5625

    def memory(**extra):
        return transformer(net, **_spec(distributed_optimizer=True, **extra)).memory["weights"]
    sixteen, one_byte = memory(dtype="nvfp4"), memory(dtype="fp8", fp8_param_gather=True)
    packed = memory(dtype="nvfp4", fp8_param_gather=True)
    assert packed == pytest.approx(sixteen - (2 - 1.125) * (sixteen - one_byte), rel=1e-9)

    mla = dict(mla={"kv_lora_rank": 64, "q_lora_rank": 96, "qk_head_dim": 32,
                    "qk_pos_emb_head_dim": 16, "v_head_dim": 32})

    def latents(dtype):
        w = transformer(net, **_spec(dtype=dtype, **mla))
        return sum(op.size for op in w.programs[0].ops if op.kind == "collective"
                   and op.name.endswith("attention.all_gather"))   # the latents
    assert latents("fp8") > 0
    assert latents("nvfp4") == pytest.approx(latents("fp8") * 0.5625, rel=1e-3)


@pytest.mark.parametrize("dtype, operand, result", [("bf16", 2, 2), ("fp8", 1, 2),
                                                    ("fp4", 0.5 + 1 / 16, 2)])
def test_a_gemm_moves_its_operands_in_its_type_and_a_low_precision_result_in_16_bits(
        dtype, operand, result):
    """A GEMM's least traffic: operands in its data type (FP4's with an E4M3 scale per 16),
    the result of an FP8 or FP4 GEMM in BF16 as Transformer Engine writes it; a thin,
    memory-bound GEMM on a device takes that traffic at the device's memory rate."""
    from flowsim.compute.gemm import gemm_ns

    m, n, k = 65536, 64, 64
    gemm = Gemm(m, n, k, 2, dtype)
    assert gemm.bytes == 2 * (operand * (m * k + k * n) + result * m * n)
    dev = flowsim.compute.device("b200")
    memory = gemm.bytes / (dev.memory_gbps * dev.memory_efficiency) + dev.launch_us * 1e3
    assert gemm_ns(dev, gemm) == pytest.approx(memory, rel=1e-12)
