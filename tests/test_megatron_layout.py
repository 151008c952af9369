"""Megatron-LM's pipeline split flags read as ``pipeline_layout``: a layout string, uneven
first and last ranks, the embedding and the loss counted as layers. Checked against
Megatron-Bridge's DeepSeek-V3 layouts, against the published rows that state the split, by
Megatron-LM's own arithmetic, and by the layouts it refuses."""

from __future__ import annotations

import warnings

import pytest

from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.workload.generators.megatron import megatron_keys
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import layer_counts


def _keys(*flags: str, layers: int = 61, pp: int = 16, mtp: int = 1) -> dict:
    args = ["--num-layers", str(layers), "--pipeline-model-parallel-size", str(pp), "--bf16",
            *(["--mtp-num-layers", str(mtp)] if mtp else []), *flags]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowsimWarning)   # none of these is left out now
        return megatron_keys(args, "train.sh")


def test_megatron_bridge_s_deepseek_v3_layouts_read_as_layers_per_stage():
    """Megatron-Bridge's (16, 1) layout: the embedding and 4 layers, 14 stages of 4, then 1
    layer with the MTP layer and the loss (recipes/deepseek/h100/deepseek_v3.py); its (8, 2)
    layout is the same 16 stages over 8 ranks of 2 chunks."""
    text = "Etttt|(tttt|)*14,tmL"
    assert _keys("--pipeline-model-parallel-layout", text)["pipeline_layout"] == \
        [4] * 15 + [1]
    keys = _keys("--pipeline-model-parallel-layout", text, pp=8)
    assert keys["vpp"] == 2 and keys["pipeline_layout"] == [4] * 15 + [1]
    assert layer_counts(parse_transformer(
        {**keys, "hidden": 256, "sequence": 128, "vocab": 1024, "micro_batches": 8},
        "spec")) == [4] * 15 + [1]


def test_counting_the_embedding_and_the_loss_agrees_with_the_rows_that_state_it():
    """Llama 3.1 405B on 8 x 8 chunks with both counted: the rows' first_last_fewer."""
    keys = _keys("--num-virtual-stages-per-pipeline-rank", "8",
                 "--account-for-embedding-in-pipeline-split",
                 "--account-for-loss-in-pipeline-split", layers=126, pp=8, mtp=0)
    spec = parse_transformer({"layers": 126, "hidden": 256, "sequence": 128, "pp": 8,
                              "vpp": 8, "global_batch": 8, "pipeline_layout":
                              "first_last_fewer"}, "row")
    assert keys["pipeline_layout"] == layer_counts(spec)
    only_loss = _keys("--account-for-loss-in-pipeline-split", layers=31, pp=4, mtp=0)
    assert only_loss["pipeline_layout"] == [8, 8, 8, 7]


def test_uneven_first_and_last_ranks_share_the_rest_and_split_over_chunks():
    keys = _keys("--decoder-first-pipeline-num-layers", "14",
                 "--decoder-last-pipeline-num-layers", "16", layers=62, pp=4, mtp=0)
    assert keys["pipeline_layout"] == [14, 16, 16, 16]
    keys = _keys("--num-virtual-stages-per-pipeline-rank", "2",
                 "--decoder-last-pipeline-num-layers", "4", layers=28, pp=4, mtp=0)
    assert keys["pipeline_layout"] == [4, 4, 4, 2] * 2   # ranks of 8, 8, 8, 4 in 2 chunks


def test_the_first_and_last_ranks_hold_every_layer_or_leave_the_middle_a_share():
    """Megatron-LM: middle ranks and middle layers both or neither (16 + 16 of 32 on 4
    ranks leaves the middle two none: refused; on 2 ranks it is the whole model)."""
    with pytest.raises(ConfigError, match="decoder-first-pipeline-num-layers"):
        _keys("--decoder-first-pipeline-num-layers", "16",
              "--decoder-last-pipeline-num-layers", "16", layers=32, pp=4, mtp=0)
    keys = _keys("--decoder-first-pipeline-num-layers", "16",
                 "--decoder-last-pipeline-num-layers", "16", layers=32, pp=2, mtp=0)
    assert keys["pipeline_layout"] == [16, 16]


def test_layers_per_virtual_stage_count_the_embedding_and_the_loss():
    """Megatron-LM derives the virtual stages from the layers per rank with the accounted
    embedding and loss: 30 + 2 over 4 ranks, 2 per stage: 4 stages a rank."""
    keys = _keys("--num-layers-per-virtual-pipeline-stage", "2",
                 "--account-for-embedding-in-pipeline-split",
                 "--account-for-loss-in-pipeline-split", layers=30, pp=4, mtp=0)
    assert keys["vpp"] == 4 and keys["pipeline_layout"] == [1] + [2] * 14 + [1]


@pytest.mark.parametrize("flags, flag", [
    (("--pipeline-model-parallel-layout", "Ettt|(tt|)*29,m|L"),
     "pipeline-model-parallel-layout"),                     # a standalone MTP stage
    (("--pipeline-model-parallel-layout", "Etttt|(tttt|)*14,tmX"),
     "pipeline-model-parallel-layout"),                     # an unknown layer
    (("--pipeline-model-parallel-layout", "Etttt|(tttt|)*14,ttmL"),
     "pipeline-model-parallel-layout"),                     # 62 decoder layers
    (("--pipeline-model-parallel-layout", "tttt|E(tttt|)*14,tmL"),
     "pipeline-model-parallel-layout"),                     # the embedding not first
    (("--decoder-first-pipeline-num-layers", "14"), "decoder-first-pipeline-num-layers"),
    (("--decoder-first-pipeline-num-layers", "x"), "decoder-first-pipeline-num-layers"),
    (("--account-for-loss-in-pipeline-split",), "account-for-loss-in-pipeline-split"),
    (("--account-for-loss-in-pipeline-split", "--decoder-last-pipeline-num-layers", "1"),
     "account-for-loss-in-pipeline-split"),
    (("--pipeline-model-parallel-layout", "Etttt|(tttt|)*14,tmL",
      "--decoder-first-pipeline-num-layers", "4"), "decoder-first-pipeline-num-layers"),
    (("--pipeline-model-parallel-layout", "Etttt|(tttt|)*14,tmL",
      "--account-for-loss-in-pipeline-split"), "account-for-loss-in-pipeline-split"),
    (("--pipeline-model-parallel-layout", "Etttt|(tttt|)*13,tttt|mtL"),
     "pipeline-model-parallel-layout"),                     # a decoder layer after m
    (("--pipeline-model-parallel-layout", "(" + "t" * 1000 + ")*999999"),
     "pipeline-model-parallel-layout"),                     # refused before it is built
    (("--decoder-first-pipeline-num-layers", "0", "--decoder-last-pipeline-num-layers",
      "1"), "decoder-first-pipeline-num-layers"),           # Megatron: larger than 0
    (("--num-layers-per-virtual-pipeline-stage", "1", "--decoder-last-pipeline-num-layers",
      "1"), "decoder-last-pipeline-num-layers"),            # uneven with layers per stage
    (("--num-layers-per-virtual-pipeline-stage", "1",
      "--num-virtual-stages-per-pipeline-rank", "2"), "num-virtual-stages-per-pipeline-rank"),
    # a flag without its value (Megatron-LM's parser refuses it; it was dropped)
    (("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "4"),
     "decoder-first-pipeline-num-layers"),
    (("--pipeline-model-parallel-layout",), "pipeline-model-parallel-layout"),
])
def test_layouts_megatron_lm_or_flowsim_cannot_run_are_refused_naming_the_flag(flags, flag):
    with pytest.raises(ConfigError, match=rf"'--{flag}': expected"):
        _keys(*flags)
