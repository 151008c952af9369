"""A precision per layer and per module (:mod:`.transformer_precision`): Megatron-Core's first
and last layers in BF16 and its quantization recipes, checked by the precision of every
layer's GEMMs and casts, the recipe's matching rules (first match, the two overrides, paths
numbered per model chunk, multi-token prediction), the step time's direction, and what is
refused."""

from __future__ import annotations

import pytest
import yaml

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Gemm, Quantize

NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
L = 4
SMALL = dict(layers=L, hidden=1024, ffn=4096, heads=16, sequence=1024, micro_batch=1,
             vocab=0, tp=1, dp=8, global_batch=8, device="gb200")


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def recipe(*rules: tuple[str, str], **flags: bool) -> dict:
    """Megatron-Core's recipe format: one config per rule, in order."""
    def config(precision: str) -> dict:
        training = {} if precision == "bf16" else \
            {"fp4_quantization_recipe": precision} if precision == "nvfp4" else \
            {"fp8_quantization_recipe": precision}
        return {"transformer_engine_config_type": "TEQuantizationParams",
                "training_recipe": {**training, **flags}}
    return {"configs": {f"c{i}": config(p) for i, (_, p) in enumerate(rules)},
            "matchers": {f"m{i}": {"type": "glob", "pattern": pattern, "config": f"c{i}",
                                   "enabled": True} for i, (pattern, _) in enumerate(rules)}}


def gemm_types(w, fragment: str = "") -> dict[int, set[str]]:
    """Each layer's forward GEMM data types (in ops whose name holds ``fragment``)."""
    out: dict[int, set[str]] = {}
    for op in w.programs[0].ops:
        if op.pass_ == "fwd" and fragment in op.name:
            out.setdefault(op.layer, set()).update(
                k.dtype for k in op.kernels if isinstance(k, Gemm))
    return out


def step(node, w) -> float:
    return float(flowsim.simulate(node, w).time_ns)


def cast_recipes(w, fragment: str) -> set[str]:
    return {k.recipe for op in w.programs[0].ops if fragment in op.name
            for k in op.kernels if isinstance(k, Quantize)}


def test_the_last_layers_run_in_bf16_without_casts(node):
    """bf16_layers_at_end 1 and at_start 1: layers 0 and L-1 are 16-bit with no cast, the
    others FP4, forward and backward."""
    w = transformer(node, **SMALL, dtype="nvfp4", bf16_layers_at_start=1,
                    bf16_layers_at_end=1)
    types = gemm_types(w, ".layer")
    assert types[0] == types[L - 1] == {"bf16"}
    assert all(types[i] == {"fp4"} for i in range(1, L - 1))
    for op in w.programs[0].ops:
        casts = [k for k in op.kernels if isinstance(k, Quantize)]
        if op.layer in (0, L - 1) and ".layer" in op.name:
            assert not casts, op.name
    assert cast_recipes(w, "layer1.") == {"nvfp4"}


def test_each_bf16_layer_changes_the_step_alike(node):
    """Layers are alike, so each one moved to 16 bits changes the step time by the same
    amount; all of them give the 16-bit run's step."""
    times = [step(node, transformer(node, **SMALL, dtype="nvfp4", bf16_layers_at_end=n))
             for n in range(L + 1)]
    steps = [b - a for a, b in zip(times, times[1:])]
    assert steps[0] != 0 and steps == pytest.approx([steps[0]] * L, rel=1e-6)
    assert times[-1] == pytest.approx(step(node, transformer(node, **SMALL, dtype="bf16")),
                                      rel=1e-12)


def test_a_recipe_puts_a_module_in_its_precision(node):
    """*.linear_proj in BF16 and *.linear_fc2 in MXFP8 under NVFP4: the attention block's
    second GEMM is 16-bit, the MLP's second FP8 with an MXFP8 cast, the rest FP4."""
    w = transformer(node, **SMALL, dtype="nvfp4",
                    quant_recipe=recipe(("*.linear_proj", "bf16"), ("*.linear_fc2", "mxfp8")))
    for op in w.programs[0].ops:
        if op.pass_ == "fwd" and op.name.endswith(".attention"):
            assert [k.dtype for k in op.kernels if isinstance(k, Gemm)] == ["fp4", "bf16"]
        if op.pass_ == "fwd" and op.name.endswith(".mlp"):
            assert [k.dtype for k in op.kernels if isinstance(k, Gemm)] == ["fp4", "fp8"]
            assert [k.recipe for k in op.kernels if isinstance(k, Quantize)] == \
                ["nvfp4", "mxfp8"]


def test_the_first_matching_rule_wins(node):
    fc2_first = recipe(("*.linear_fc2", "bf16"), ("*mlp.*", "mxfp8"))
    mlp_first = recipe(("*mlp.*", "mxfp8"), ("*.linear_fc2", "bf16"))
    a = gemm_types(transformer(node, **SMALL, dtype="nvfp4", quant_recipe=fc2_first), ".mlp")
    b = gemm_types(transformer(node, **SMALL, dtype="nvfp4", quant_recipe=mlp_first), ".mlp")
    assert a[0] == {"fp8", "bf16"} and b[0] == {"fp8"}


def test_overrides_follow_megatron_core_defaults(node):
    """A rule replaces a quantized layer's autocast (unless override_quantized_autocast is
    false) and turns none on in a BF16 layer (unless override_nonquantized_autocast)."""
    rule = ("*.linear_fc1", "mxfp8")
    base = dict(SMALL, dtype="nvfp4", bf16_layers_at_end=1)
    default = gemm_types(transformer(node, **base, quant_recipe=recipe(rule)), ".mlp")
    assert default[0] == {"fp8", "fp4"} and default[L - 1] == {"bf16"}
    kept = gemm_types(transformer(node, **base, quant_recipe=recipe(
        rule, override_quantized_autocast=False)), ".mlp")
    assert kept[0] == {"fp4"}
    forced = gemm_types(transformer(node, **base, quant_recipe=recipe(
        rule, override_nonquantized_autocast=True)), ".mlp")
    assert forced[L - 1] == {"fp8", "bf16"}


def test_paths_number_layers_within_their_model_chunk(node):
    """decoder.layers.0.* matches the first layer of each pipeline stage (Megatron-Core numbers
    a chunk's layers from 0), not only the model's first."""
    w = transformer(node, **dict(SMALL, dp=4, global_batch=8), pp=2, dtype="nvfp4",
                    quant_recipe=recipe(("decoder.layers.0.*", "bf16")))
    types: dict[int, set[str]] = {}
    for program in w.programs:
        for op in program.ops:
            if op.pass_ == "fwd" and ".layer" in op.name:
                types.setdefault(op.layer, set()).update(
                    k.dtype for k in op.kernels if isinstance(k, Gemm))
    assert types[0] == types[2] == {"bf16"} and types[1] == types[3] == {"fp4"}


def test_multi_token_prediction_ignores_fp4(node):
    """Megatron-Core runs the depths in the run's FP8 context and ignores FP4: 16-bit under
    NVFP4, FP8 under MXFP8 (where a recipe may still change a module)."""
    spec = dict(SMALL, mtp_layers=1, vocab=32000)
    nv = gemm_types(transformer(node, **spec, dtype="nvfp4"), ".mtp0")
    assert nv[L] == {"bf16"}
    mx = gemm_types(transformer(node, **spec, dtype="mxfp8"), ".mtp0")
    assert "fp8" in mx[L]
    eh = gemm_types(transformer(node, **spec, dtype="mxfp8",
                                quant_recipe=recipe(("mtp.*", "bf16"))), ".mtp0")
    assert "fp8" not in eh[L]


def test_a_hybrid_depth_takes_the_per_layer_context_again(node):
    """A hybrid model's depth is a stack of its own (Megatron-Core's HybridStack): under NVFP4
    its attention and experts run in FP4, its projection (the depth block's) in 16 bits; with
    one layer at the start in BF16 the depth's first layer (its attention) is 16-bit too."""
    from flowsim.workload.generators.transformer_precision import module_path

    hybrid = dict(SMALL, layers=3, hybrid_pattern="M*E/*E", experts=8, top_k=2, ep=8,
                  vocab=32000, mamba={"heads": 32, "head_dim": 64, "state": 64, "groups": 8},
                  dtype="nvfp4")
    w = transformer(node, **hybrid)
    assert gemm_types(w, ".mtp0.projection")[3] == {"bf16"}
    assert gemm_types(w, ".mtp0.layer3.attention")[3] == {"fp4"}
    assert gemm_types(w, ".mtp0.layer3.experts")[3] == {"fp4"}
    first = transformer(node, **hybrid, bf16_layers_at_start=1)
    assert gemm_types(first, ".mtp0.layer3.attention")[3] == {"bf16"}
    assert gemm_types(first, ".mtp0.layer3.experts")[3] == {"fp4"}
    spec = parse_transformer(dict(hybrid, hybrid_pattern="M*E/*E/*E", mtp_repeated=True),
                             "spec.yml")
    assert module_path(spec, 4, "mlp.experts.linear_fc1") == \
        "mtp.layers.0.mtp_model_layer.layers.1.mlp.experts.linear_fc1"   # repeated: one


def test_hybrid_modules_take_their_recipe(node):
    """Mamba's out_proj in MXFP8 and LatentMoE's projections in BF16 under NVFP4 (Nemotron 3
    Super's te_quant.cfg): the experts stay FP4."""
    hybrid = dict(SMALL, layers=3, hybrid_pattern="M*E", experts=8, top_k=2, ep=8,
                  moe_latent=256, mamba={"heads": 32, "head_dim": 64, "state": 64,
                                         "groups": 8}, dtype="nvfp4")
    w = transformer(node, **hybrid, quant_recipe=recipe(
        ("*mixer.out_proj", "mxfp8"), ("*mlp.fc[12]_latent_proj", "bf16")))
    mamba = gemm_types(w, ".mamba")   # (the scan's small products: 16-bit)
    assert mamba[0] == {"fp4", "fp8", "bf16"}
    assert cast_recipes(w, "layer0.mamba") == {"nvfp4", "mxfp8"}
    assert gemm_types(w, ".router")[2] == {"bf16"}   # the router's and the down projection
    assert gemm_types(w, ".experts")[2] == {"fp4"}
    plain = transformer(node, **hybrid)
    assert gemm_types(plain, ".mamba")[0] == {"fp4", "bf16"}
    assert gemm_types(plain, ".router")[2] == {"fp4", "bf16"}
    assert step(node, w) != step(node, plain)


def test_a_recipe_file_is_read_beside_the_spec(tmp_path):
    (tmp_path / "te_quant.cfg").write_text(yaml.safe_dump(recipe(("*.linear_qkv", "bf16"))))
    spec = parse_transformer(dict(SMALL, dtype="nvfp4", quant_recipe="te_quant.cfg"),
                             str(tmp_path / "spec.yml"))
    assert [(r.pattern, r.precision) for r in spec.quant_recipe] == [("*.linear_qkv", "bf16")]


@pytest.mark.parametrize("change, key", [
    (dict(dtype="fp8", bf16_layers_at_end=1), "fp8_recipe"),            # delayed scaling
    (dict(dtype="nvfp4", bf16_layers_at_end=L + 1), "bf16_layers_at_end"),
    (dict(dtype="bf16", bf16_layers_at_start=1), "bf16_layers_at_start"),
    (dict(dtype="nvfp4", bf16_layers_at_end=-1), "bf16_layers_at_end"),
    (dict(dtype="nvfp4", quant_recipe=[1, 2]), "quant_recipe"),
    (dict(dtype="nvfp4", quant_recipe="missing.cfg"), "quant_recipe"),
    (dict(dtype="mxfp8", bf16_layers_at_end=3, pp=2, dp=4), "bf16_layers_at_end"),
    (dict(dtype="fp8", fp8_recipe="tensorwise", bf16_layers_at_end=1, device=None,
          roofline={"peak_tflops": 100, "memory_bandwidth_GBps": 1000}),
     "'roofline': expected unset"),
])
def test_bad_precision_settings_name_the_key(change, key):
    with pytest.raises(ConfigError, match=key):
        parse_transformer(dict(SMALL, **change), "spec.yml")


@pytest.mark.parametrize("broken, words", [
    ({"type": "regex"}, "type"),
    ({"config": "nowhere"}, "config"),
    ({"pattern": ""}, "pattern"),
])
def test_bad_matchers_name_the_matcher(broken, words):
    r = recipe(("*.linear_qkv", "bf16"))
    r["matchers"]["m0"].update(broken)
    with pytest.raises(ConfigError, match=f"matchers.m0.{words}"):
        parse_transformer(dict(SMALL, dtype="nvfp4", quant_recipe=r), "spec.yml")


@pytest.mark.parametrize("training, words", [
    ({"fp8_quantization_recipe": "blockwise"}, "tensorwise or mxfp8"),
    ({"fp8_quantization_recipe": "nvfp4"}, "tensorwise or mxfp8"),
    ({"fp4_quantization_recipe": "mxfp8"}, "fp4_quantization_recipe nvfp4"),
    ({"fp8_recipe": "mxfp8"}, "TEQuantizationRecipe"),                # a misspelt field
    ({"fp8_quantization_recipe": "mxfp8", "fp4_quantization_recipe": "nvfp4"}, "one of"),
    ({"override_quantized_autocast": "yes"}, "true or false"),
])
def test_bad_configs_name_the_config(training, words):
    r = recipe(("*.linear_qkv", "bf16"))
    r["configs"]["c0"]["training_recipe"] = training
    with pytest.raises(ConfigError, match=words):
        parse_transformer(dict(SMALL, dtype="nvfp4", quant_recipe=r), "spec.yml")


def test_disabled_matchers_are_skipped():
    r = recipe(("*.linear_qkv", "bf16"))
    r["matchers"]["m0"]["enabled"] = False
    assert parse_transformer(dict(SMALL, dtype="nvfp4", quant_recipe=r),
                             "spec.yml").quant_recipe == ()


@pytest.mark.parametrize("flags, keys", [
    ("--fp8-format e4m3 --fp8-recipe mxfp8 --first-last-layers-bf16",
     {"bf16_layers_at_start": 1, "bf16_layers_at_end": 1}),
    ("--fp4-format e2m1 --first-last-layers-bf16 --num-layers-at-start-in-bf16 0 "
     "--num-layers-at-end-in-bf16 3", {"bf16_layers_at_start": 0, "bf16_layers_at_end": 3}),
    ("--bf16 --first-last-layers-bf16", {}),                  # no low precision: nothing
    ("--fp4-format e2m1 --te-precision-config-file te_quant.cfg",
     {"quant_recipe": "te_quant.cfg"}),
])
def test_megatron_lm_s_precision_flags_are_read(flags, keys):
    from flowsim.workload.generators.megatron import megatron_keys

    read = megatron_keys(flags + " --num-layers 4", "<test>")
    assert {k: read[k] for k in ("bf16_layers_at_start", "bf16_layers_at_end",
                                 "quant_recipe") if k in read} == keys


@pytest.mark.parametrize("model, keys", [
    (dict(fp4=True, first_last_layers_bf16=True, num_layers_at_start_in_bf16=0,
          num_layers_at_end_in_bf16=2), {"bf16_layers_at_start": 0, "bf16_layers_at_end": 2}),
    (dict(fp8="e4m3", fp8_recipe="mxfp8", first_last_layers_bf16=False), {}),
    (dict(first_last_layers_bf16=True), {}),   # BF16 training: Megatron-Core ignores it
])
def test_megatron_bridge_s_precision_settings_are_read(model, keys):
    from flowsim.workload.generators.megatron_bridge import bridge_keys

    base = dict(num_layers=L, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                seq_length=256, vocab_size=1024)
    config = {"model": {**base, **model},
              "train": {"global_batch_size": 16, "micro_batch_size": 1}}
    read = bridge_keys(config, "<test>")
    assert {k: read[k] for k in ("bf16_layers_at_start", "bf16_layers_at_end")
            if k in read} == keys


def test_a_bridge_recipe_reaches_the_spec(node):
    config = {"model": dict(num_layers=L, hidden_size=1024, ffn_hidden_size=4096,
                            num_attention_heads=16, seq_length=1024, vocab_size=1024, fp4=True,
                            quant_recipe=recipe(("*.linear_fc2", "bf16"))),
              "train": {"global_batch_size": 8, "micro_batch_size": 1}}
    w = flowsim.load_workload({"generator": "megatron_bridge", "config": config, "dp": 8,
                               "device": "gb200"}, network=node)
    assert gemm_types(w, ".mlp")[0] == {"fp4", "bf16"}


def test_the_workloads_page_precision_examples_hold():
    """The Training workloads page's NVFP4 run with its last four layers in 16 bits prints the
    step it quotes, and its Super recipe reads as four rules in order."""
    import json
    import re
    import subprocess
    import sys

    from conftest import REPO

    page = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = page.index("for d in bf16 fp8 mxfp8 nvfp4; do")
    command = page[page.index("flowsim run", start): page.index("done", start)]
    args = [a.replace("$d", "nvfp4") for a in command.replace("\\\n", " ").split()[2:]]
    section = page[page.index("bf16_layers_at_start` and `bf16_layers_at_end`"):]
    extra = re.search(r"with `(--set workload\.bf16_layers_at_end=\d+)` prints ([\d.]+) s, "
                      r"not\s+([\d.]+) s", section)
    for more, quoted in (([], extra.group(3)), (extra.group(1).split(), extra.group(2))):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *args, *more],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        assert f"{json.loads(out)['time_ns'] / 1e9:.2f}" == quoted
    block = section[section.index("```yaml") + 7: section.index("```", section.index("```yaml")
                                                                  + 7)]
    rules = parse_transformer(dict(SMALL, dtype="nvfp4", **yaml.safe_load(block)),
                              "spec.yml").quant_recipe
    assert [(r.pattern, r.precision) for r in rules] == [
        ("*self_attention.linear_*", "bf16"), ("*mlp.fc[12]_latent_proj", "bf16"),
        ("mtp.*", "bf16"), ("*mixer.out_proj", "mxfp8")]


def test_the_accuracy_page_s_nvfp4_step_table_is_flowsim_s():
    """The Super NVFP4 section's table of MXFP8-to-NVFP4 step ratios: each row re-simulated
    from the record's rows (the MXFP8 row, and the NVFP4 row without and with its layers in
    BF16 and its recipe); the published line from the rows' own figures."""
    import sys
    import warnings
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    import validate_published as vp

    def step(row):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(flowsim.simulate(vp.network(row), vp.spec(row), "nccl",
                                          model=vp.model_for(row)).time_ns)

    page = (root / "docs" / "accuracy" / "published.md").read_text()
    start = page.index("## A precision per layer and per module")
    table = [line for line in page[start: page.index("\n## ", start)].splitlines()
             if line.startswith(("| NVFP4 everywhere", "| the last 14", "| and the recipe",
                                 "| published (tokens"))]
    assert len(table) == 4
    columns = []
    for system in ("gb300", "gb200"):
        mx = vp.rows(f"mbridge2606_{system}_nemotron3_super_mxfp8")[0]
        nv = vp.rows(f"mbridge2606_{system}_nemotron3_super_nvfp4")[0]
        base = step(mx)
        column = [base / step(dict(nv, bf16_layers_at_end="", quant_recipe="")),
                  base / step(dict(nv, quant_recipe="")), base / step(nv),
                  float(nv["published"]) / (512 * 8192 / 64 / vp.published_seconds(mx))]
        columns.append(column)
    for line, values in zip(table, zip(*columns)):
        assert line.endswith(" | ".join(f"{v:.3f}" for v in values) + " |"), line


def test_the_readme_s_precision_command_runs_and_costs_time():
    """The README's Llama 3 70B command with NVFP4 and its last four layers in 16 bits: a
    longer step than NVFP4 everywhere (those layers' GEMMs in BF16 on the last stage)."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    base = shlex.split(re.search(r"`(flowsim run --workload llama3_70b --network "
                                 r"gb300_nvl72[^`]*)`", readme).group(1))[2:]
    mixed = shlex.split(re.search(r"a precision per module as Megatron-Core's quantization "
                                  r"recipes give them \(`([^`]*)`", readme).group(1))

    def run(*extra):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *base,
                              *extra], capture_output=True, text=True, check=True,
                             cwd=REPO).stdout
        return json.loads(out)["time_ns"]

    assert run(*mixed) > run(*mixed[:2])


def test_a_bridge_run_config_s_recipe_class_is_refused_with_the_way_round():
    """Megatron-Bridge's to_yaml writes model.quant_recipe as its class alone: refused,
    naming the key and the override that gives the file."""
    from flowsim.workload.generators.megatron_bridge import bridge_keys

    config = {"model": dict(num_layers=L, hidden_size=1024, ffn_hidden_size=4096,
                            num_attention_heads=8, seq_length=256, vocab_size=1024, fp4=True,
                            quant_recipe={"_target_": "megatron.core.quantization."
                                          "quant_config.RecipeConfig", "_call_": True}),
              "train": {"global_batch_size": 16, "micro_batch_size": 1}}
    with pytest.raises(ConfigError, match="model.quant_recipe.*overrides"):
        bridge_keys(config, "<test>")


def test_a_block_scaled_module_on_hopper_names_the_recipe(node):
    """A quant_recipe rule asking for MXFP8 on an H100 is refused in one line that says a
    rule may ask for it (the spec itself sets no block-scaled recipe)."""
    w = transformer(node, **dict(SMALL, device="h100_sxm_80gb"), dtype="fp8",
                    fp8_recipe="tensorwise", quant_recipe=recipe(("*.linear_fc2", "mxfp8")))
    with pytest.raises(ConfigError, match="quant_recipe rule"):
        flowsim.simulate(node, w)
