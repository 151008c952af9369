"""Selective recomputation by module (``recompute_modules``, Megatron-Core's
``--recompute-modules``): which forward kernels run again before each layer's backward, with
their collectives; what the core attention's checkpoint costs under flash attention; the
activations they keep out of memory; what is refused; and the importers that read it."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.kernels import Attention, Elementwise, Gemm

NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
L = 4
DENSE = dict(layers=L, hidden=1024, ffn=4096, heads=16, sequence=1024, micro_batch=1, vocab=0,
             tp=2, dp=4, global_batch=8, device="h100_sxm_80gb")
MOE = dict(DENSE, experts=8, top_k=2, ep=4, shared_ffn=1024, moe_ffn=1024, gated_mlp=True,
           dtype="fp8", fp8_recipe="tensorwise")


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def step(node, **keys) -> float:
    return float(flowsim.simulate(node, transformer(node, **keys)).time_ns)


def again(w, layer: int = 1) -> list:
    """The ops re-run before ``layer``'s backward in the first micro-batch."""
    return [op for op in w.programs[0].ops if op.name.startswith(f"mb0.recompute.layer{layer}.")]


def test_a_dense_mlp_runs_again_with_its_collectives(node):
    """``mlp``: FC1, the activation and FC2 again, between their all-gather and reduce-scatter
    (sequence parallelism), before the layer's backward; nothing else."""
    w = transformer(node, **DENSE, sp=True, recompute="selective", recompute_modules=["mlp"])
    ops = again(w)
    gemms = [k for op in ops for k in op.kernels if isinstance(k, Gemm)]
    assert len(gemms) == 2 and {op.collective for op in ops} >= {"all_gather", "reduce_scatter"}
    plain = transformer(node, **DENSE, sp=True)
    fc1 = next(op for op in plain.programs[0].ops if op.name == "mb0.layer1.mlp")
    assert [k for k in fc1.kernels if isinstance(k, Gemm)] == gemms
    assert all(op.pass_ == "fwd" for op in ops)
    first_backward = next(i for i, op in enumerate(w.programs[0].ops)
                          if op.layer == 1 and op.pass_ == "ig")
    assert max(w.programs[0].ops.index(op) for op in ops) < first_backward


def test_a_mixture_of_experts_runs_again_whole(node):
    """``moe``: router, dispatch, experts, combine and shared experts again, the all-to-alls
    included; its activations leave the kept memory."""
    w = transformer(node, **MOE, recompute="selective", recompute_modules=["moe"])
    names = [op.name for op in again(w)]
    assert any("dispatch" in n for n in names) and any("combine" in n for n in names)
    assert any("shared_expert" in n for n in names) and any("router" in n for n in names)
    kept = transformer(node, **MOE).memory["activations"]
    assert w.memory["activations"] < kept


@pytest.mark.parametrize("module, expected", [
    ("layernorm", {"layernorm"}),
    ("moe_act", {"expert_activation"}),
])
def test_parts_of_a_mixture_of_experts_run_again(node, module, expected):
    """``layernorm``: the pre-MLP norm (a module of its own before the router); ``moe_act``:
    the experts' activation, FC2's input cast again in FP8; neither re-runs a GEMM."""
    ops = again(transformer(node, **MOE, recompute="selective", recompute_modules=[module]))
    kernels = [k for op in ops for k in op.kernels]
    assert {k.name for k in kernels if isinstance(k, Elementwise)} == expected
    assert not any(isinstance(k, Gemm) for k in kernels)
    assert any(k.__class__.__name__ == "Quantize" for k in kernels) == (module == "moe_act")


def test_the_shared_experts_run_again_with_their_collectives(node):
    ops = again(transformer(node, **MOE, recompute="selective",
                            recompute_modules=["shared_experts"]))
    assert all("shared_expert" in op.name for op in ops)
    assert sum(isinstance(k, Gemm) for op in ops for k in op.kernels) == 2


def test_flash_attention_s_checkpoint_runs_its_forward_again(node):
    """``core_attn`` (selective's default): Megatron-Core re-runs the fused attention's
    forward before its backward, so the backward block holds a forward attention kernel."""
    w = transformer(node, **DENSE, recompute="selective")
    block = next(op for op in w.programs[0].ops if op.name == "mb0.layer1.attention.dgrad")
    forwards = [k for k in block.kernels if isinstance(k, Attention) and not k.backward]
    assert len(forwards) == 1
    none = transformer(node, **DENSE)
    block = next(op for op in none.programs[0].ops if op.name == "mb0.layer1.attention.dgrad")
    assert not [k for k in block.kernels if isinstance(k, Attention) and not k.backward]
    assert step(node, **DENSE) < step(node, **DENSE, recompute="selective")


def test_every_module_costs_less_than_full_recomputation(node):
    """Each module, and all of them, cost time, less than re-running the whole layer."""
    base, full = step(node, **MOE), step(node, **MOE, recompute="full")
    everything = step(node, **MOE, recompute="selective",
                      recompute_modules=["core_attn", "layernorm", "moe"])
    assert base < everything < full
    for module in ("core_attn", "layernorm", "moe_act", "shared_experts", "moe"):
        assert base < step(node, **MOE, recompute="selective", recompute_modules=[module])


def test_latent_attention_s_up_projections_run_again(node):
    mla = dict(DENSE, mla={"q_lora_rank": 256, "kv_lora_rank": 128, "qk_head_dim": 64,
                           "qk_pos_emb_head_dim": 32, "v_head_dim": 64})
    ops = again(transformer(node, **mla, recompute="selective",
                           recompute_modules=["mla_up_proj", "layernorm"]))
    (op,) = ops
    assert sum(isinstance(k, Gemm) for k in op.kernels) == 2   # queries' and keys' up
    assert "layernorm" in {k.name for k in op.kernels if isinstance(k, Elementwise)}


def test_a_hybrid_model_s_mixers_run_nothing_again(node):
    hybrid = {**{k: v for k, v in MOE.items() if k != "fp8_recipe"}, "layers": 3,
              "hybrid_pattern": "M*E", "dtype": "bf16",
              "mamba": {"heads": 32, "head_dim": 64, "state": 64, "groups": 8}}
    w = transformer(node, **hybrid, recompute="selective",
                    recompute_modules=["layernorm", "moe_act", "core_attn"])
    assert not again(w, 0) and not again(w, 1) and again(w, 2)


@pytest.mark.parametrize("change, key", [
    (dict(recompute_modules=["mlp"]), "recompute_modules"),                 # not selective
    (dict(recompute="selective", recompute_modules=["mla_up_proj"]), "recompute_modules"),
    (dict(recompute="selective", recompute_modules=["moe_act"]), "recompute_modules"),
    (dict(recompute="selective", recompute_modules=["attention"]), "recompute_modules"),
    (dict(recompute="selective", recompute_modules=["layernorm"], dtype="fp8"), "fp8_recipe"),
])
def test_bad_recompute_modules_name_the_key(change, key):
    with pytest.raises(ConfigError, match=key):
        parse_transformer(dict(DENSE, **change), "spec.yml")


def test_the_fused_grouped_mlp_rebuilds_its_activation_in_its_backward(node):
    """Under ``fused_grouped_mlp`` ``moe_act`` re-runs nothing apart (Transformer Engine's
    fused MLP rebuilds FC2's input inside its activation's backward kernel) and still keeps
    FC2's input out of memory."""
    fused = dict(MOE, device="gb200", fp8_recipe="mxfp8", fused_grouped_mlp=True)
    w = transformer(node, **fused, recompute="selective", recompute_modules=["moe_act"])
    assert not again(w)
    assert w.memory["activations"] < transformer(node, **fused).memory["activations"]


@pytest.mark.parametrize("flags, keys", [
    ("--recompute-granularity selective --recompute-modules moe_act layernorm",
     {"recompute": "selective", "recompute_modules": ["moe_act", "layernorm"]}),
    ("--recompute-granularity selective", {"recompute": "selective"}),
    ("--recompute-activations --recompute-modules moe",
     {"recompute": "selective", "recompute_modules": ["moe"]}),
    ("--moe-layer-recompute", {"recompute": "selective",
                               "recompute_modules": ["core_attn", "moe"]}),
    ("--recompute-granularity full --recompute-modules mlp", {"recompute": "full"}),
    ("--use-legacy-models --use-flash-attn --recompute-activations", {"recompute": "none"}),
    ("--use-legacy-models --use-flash-attn --recompute-granularity selective "
     "--recompute-modules core_attn mlp", {"recompute": "selective",
                                          "recompute_modules": ["mlp"]}),
    ("--use-flash-attn --recompute-activations", {"recompute": "selective"}),
])
def test_megatron_lm_s_recompute_flags_are_read(flags, keys):
    from flowsim.workload.generators.megatron import megatron_keys

    read = megatron_keys(flags + " --num-layers 4 --bf16", "<test>")
    assert {k: read[k] for k in ("recompute", "recompute_modules") if k in read} == keys


@pytest.mark.parametrize("flags, words", [
    ("--recompute-granularity selective --recompute-modules", "one or more modules"),
    ("--recompute-granularity selective --recompute-modules moe_layer", "recompute modules"),
    ("--recompute-granularity full --moe-layer-recompute", "--moe-layer-recompute"),
])
def test_megatron_lm_s_bad_recompute_flags_are_refused(flags, words):
    from flowsim.workload.generators.megatron import megatron_keys

    with pytest.raises(ConfigError, match=words):
        megatron_keys(flags + " --num-layers 4 --bf16", "<test>")


def test_the_combined_1f1b_refuses_a_recomputed_mixture_of_experts():
    with pytest.raises(ConfigError, match="moe_a2a_overlap"):
        parse_transformer(dict(MOE, recompute="selective", recompute_modules=["moe"],
                               moe_a2a_overlap=True, pp=1), "spec.yml")


def test_modules_of_layers_flowsim_does_not_model_are_named():
    from flowsim.workload.generators.megatron import megatron_keys

    with pytest.warns(flowsim.FlowsimWarning, match="gdn_norm_out"):
        read = megatron_keys("--recompute-granularity selective --recompute-modules "
                             "gdn_norm_out mlp --num-layers 4 --bf16", "<test>")
    assert read["recompute_modules"] == ["mlp"]


@pytest.mark.parametrize("model, keys", [
    (dict(recompute_granularity="selective", recompute_modules=["layernorm", "moe_act"]),
     {"recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]}),
    (dict(recompute_granularity="selective", recompute_modules=[]), {"recompute": "none"}),
    (dict(recompute_granularity=None, recompute_modules=["mlp"]), {"recompute": "none"}),
])
def test_megatron_bridge_s_recompute_modules_are_read(model, keys):
    from flowsim.workload.generators.megatron_bridge import bridge_keys

    base = dict(num_layers=L, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                seq_length=256, vocab_size=1024)
    read = bridge_keys({"model": {**base, **model},
                        "train": {"global_batch_size": 16, "micro_batch_size": 1}}, "<test>")
    assert {k: read[k] for k in ("recompute", "recompute_modules") if k in read} == keys


def test_the_workloads_page_recompute_example_prints_what_it_says():
    """The Training workloads page's Nano runs: each quoted step and memory is flowsim's."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    page = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = page.index("### Recomputation, module by module")
    section = " ".join(page[start:page.index("\n### ", start)].split())
    base = shlex.split(re.search(r"\(`(flowsim run --workload nemotron3_nano[^`]*)`\)",
                                 section).group(1))[2:]
    quoted = re.findall(r"([\d.]+) s at ([\d.]+) GiB", section)
    selective = ["--set", "workload.recompute=selective", "--set"]
    runs = [[], [*selective, "workload.recompute_modules=[moe_act,layernorm]"],
            [*selective, "workload.recompute_modules=[moe,layernorm,core_attn,moe_act]"],
            ["--set", "workload.recompute=full"]]
    assert len(quoted) == len(runs)
    for extra, (seconds, gib) in zip(runs, quoted):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *base, *extra],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        summary = json.loads(out)
        assert (f"{summary['time_ns'] / 1e9:.2f}", f"{summary['memory_gib']:.1f}") == \
            (seconds, gib), extra


def test_a_nemo_2_recipe_s_recompute_modules_are_read():
    import warnings

    from flowsim.workload.generators.nemo2 import nemo2_keys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = nemo2_keys("llama3_8b", "spec.yml", "model.config.recompute_granularity="
                          "selective 'model.config.recompute_modules=[\"mlp\"]'")
    assert (keys["recompute"], keys["recompute_modules"]) == ("selective", ["mlp"])


def test_the_backward_waits_for_what_was_recomputed(node):
    """The layer's first backward op depends on the re-run's last op (a mixture of experts'
    combine included), not only on the stream's order."""
    w = transformer(node, **MOE, recompute="selective", recompute_modules=["moe"])
    ops = w.programs[0].ops
    rerun = [op for op in ops if op.name.startswith("mb0.recompute.layer1.")]
    last = max(rerun, key=ops.index)
    first = next(op for op in ops if op.layer == 1 and op.pass_ == "ig"
                 and not op.name.startswith("mb0.recompute") and op.name.startswith("mb0."))
    assert last.id in first.deps, (last.name, first.name)
    assert rerun


def test_the_readme_s_recompute_command_runs_and_does_what_it_says():
    """The README's Nano command with its mixtures of experts and norms recomputed: a longer
    step and fewer activations than without."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    base = shlex.split(re.search(r"`(flowsim run --workload nemotron3_nano[^`]*)`",
                                 readme).group(1))[2:]
    extra = shlex.split(re.search(r"`--recompute-modules` runs it \(`([^`]*)` on the Nano",
                                  readme).group(1))

    def run(*more):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *base, *more],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        return json.loads(out)

    plain, recomputed = run(), run(*extra)
    assert recomputed["time_ns"] > plain["time_ns"]
    assert recomputed["memory"]["activations"] < plain["memory"]["activations"]
