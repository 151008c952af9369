"""The accuracy page's table of Megatron-Bridge 26.06 rows: each row's published step and
flowsim's error as the record (``validation/published/results.csv``) has them, and the keys
the page says each row sets."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import validate_published as vp  # noqa: E402

from conftest import page_table, published_record, recorded_cells  # noqa: E402

#: the page's rows, in its order
RUNS = ("gb300_qwen3_30b_a3b_mxfp8_8gpu", "gb200_qwen3_30b_a3b_mxfp8_8gpu",
        "b300_qwen3_30b_a3b_mxfp8_8gpu", "gb300_qwen3_235b_a22b_mxfp8_256gpu",
        "gb200_qwen3_235b_a22b_mxfp8_256gpu", "gb300_deepseek_v3_mxfp8_256gpu",
        "gb300_deepseek_v3_mxfp8_256gpu_gbs15360", "gb200_deepseek_v3_mxfp8_256gpu",
        "gb300_gpt_oss_120b_mxfp8_64gpu", "gb200_gpt_oss_120b_mxfp8_64gpu",
        "b300_deepseek_v3_mxfp8_256gpu", "b300_gpt_oss_120b_mxfp8_64gpu",
        "h100_qwen3_30b_a3b_fp8_16gpu")
KEYS = ("moe_a2a_overlap", "fused_grouped_mlp", "fp8_attention")


def test_the_26_06_table_on_the_accuracy_page_is_the_record_s():
    record = published_record()
    rows = {r["run"]: r for r in vp.rows()}
    table = page_table("Megatron-Bridge 26.06", "26.06")
    # Llama's, Nemotron 3's and Kimi K2's rows (Muon) are in tables of their own
    assert len(table) == len(RUNS) == sum(r.startswith("mbridge2606") and "llama" not in r
                                          and "nemotron3" not in r and "kimi" not in r
                                          for r in record)
    for cells, run in zip(table, RUNS):
        assert cells[1:3] == recorded_cells(record[f"mbridge2606_{run}"]), cells
        keys = {k for k in KEYS if rows[f"mbridge2606_{run}"].get(k) == "true"}
        # the B300 rows set none of the three keys, the GB200 DeepSeek-V3 row no FP8
        # attention, every other row all three
        if "none of the keys" in cells[0]:
            assert not keys, run
        elif any("(not set)" in cell for cell in cells):
            assert keys == {"moe_a2a_overlap", "fused_grouped_mlp"}
        else:
            assert keys == set(KEYS), run


#: the fine-tuning table's rows, in the page's order
FINETUNE = ("gb300_llama3_70b_sft_fp8_32gpu", "gb300_llama3_70b_sft_mxfp8_32gpu",
            "gb200_llama3_70b_sft_fp8_32gpu", "gb200_llama3_70b_sft_mxfp8_32gpu",
            "h100_llama3_70b_sft_fp8_32gpu", "gb300_llama3_70b_lora_fp8_8gpu",
            "gb300_llama3_70b_lora_mxfp8_8gpu", "gb200_llama3_70b_lora_fp8_8gpu",
            "gb200_llama3_70b_lora_mxfp8_8gpu", "h100_llama3_70b_lora_fp8_8gpu")


def test_the_26_06_fine_tuning_table_is_the_record_s():
    """Each row's published step and error as recorded, every row of the file on the page;
    the LoRA rows adapt QKV alone at rank 16, the SFT rows train every weight."""
    record = published_record()
    rows = {r["run"]: r for r in vp.rows() if r["file"] == "megatron_bridge_finetune.csv"}
    table = page_table("Megatron-Bridge 26.06: fine-tuning", "26.06")
    assert len(table) == len(FINETUNE) == len(rows)
    for cells, run in zip(table, FINETUNE):
        recorded, row = record[f"mbridge2606_{run}"], rows[f"mbridge2606_{run}"]
        assert cells[1:] == recorded_cells(recorded), cells
        lora = "_lora_" in run
        assert cells[0].startswith("LoRA" if lora else "SFT")
        assert (row["lora_rank"], row["lora_targets"]) == (("16", "linear_qkv") if lora
                                                          else ("", ""))


#: the hybrid model's table: its rows in the page's order
NANO = ("gb300", "gb200", "b300", "h100", "b200")


def test_the_nemotron_3_nano_table_is_the_record_s():
    """Each row's published step and error as recorded, every row of the file on the page;
    the H100 row, whose config recomputes modules, names them."""
    record = published_record()
    rows = [r for r in vp.rows() if r["file"] == "megatron_bridge_hybrid.csv"
            and "nano" in r["run"]]
    table = page_table("Hybrid models: Nemotron 3 Nano", "Megatron-Bridge row")
    assert len(table) == len(NANO) == len(rows)
    for cells, system in zip(table, NANO):
        run = next(r["run"] for r in rows if f"_{system}_" in r["run"])
        assert cells[1:3] == recorded_cells(record[run]), cells
        modules = next(r["recompute_modules"] for r in rows if r["run"] == run)
        assert modules.replace(";", ", ") in cells[0] if modules else \
            "recompute" not in cells[0], cells


def test_the_automodel_table_is_the_record_s():
    """NeMo AutoModel's two rows on the page, each as recorded; both run FSDP2 with the
    gradient reductions deferred and the parameters kept across accumulation steps."""
    record = published_record()
    rows = [r for r in vp.rows() if r["file"] == "automodel_h100.csv"]
    table = page_table("NeMo AutoModel: Nemotron 3 Nano beside Qwen3 MoE", "AutoModel row")
    assert len(table) == len(rows) == 2
    for cells, run in zip(table, ("nemotron3_nano", "qwen3_30b_a3b")):
        row = next(r for r in rows if run in r["run"])
        assert cells[1:3] == recorded_cells(record[row["run"]]), cells
        assert (row["fsdp"], row["fsdp_defer_grad_sync"], row["fsdp_reshard"]) == \
            ("true", "true", "after_step")


def test_the_nemotron_3_super_table_is_the_record_s():
    """Super's MXFP8 rows, each as recorded, in the page's order; LatentMoE and the repeated
    depths on every row."""
    record = published_record()
    rows = [r for r in vp.rows() if "nemotron3_super_mxfp8" in r["run"]]
    table = page_table("Nemotron 3 Super: LatentMoE and a repeated depth", "Super row")
    assert len(table) == len(rows) == 4
    for cells, system in zip(table, ("gb300", "gb200", "b300", "b200")):
        row = next(r for r in rows if f"_{system}_" in r["run"])
        assert cells[1:3] == recorded_cells(record[row["run"]]), cells
        assert f"TP {row['tp']}, EP {row['ep']}" in cells[0]
        assert (row["moe_latent"], row["mtp_layers"], row["mtp_repeated"]) == ("1024", "2",
                                                                                "true")


def test_the_nemotron_3_super_nvfp4_table_is_the_record_s():
    """Super's NVFP4 rows (a precision per layer and per module), each as recorded: published
    step, flowsim's step and error, in the page's order."""
    record = published_record()
    table = [cells for cells in page_table("A precision per layer and per module",
                                           "Super row") if cells[0].startswith("64 ")]
    rows = [r for r in vp.rows() if "nemotron3_super_nvfp4" in r["run"]]
    assert len(table) == len(rows) == 4
    for cells, system in zip(table, ("gb300", "gb200", "b300", "b200")):
        row = next(r for r in rows if f"_{system}_" in r["run"])
        recorded = record[row["run"]]
        published, error = recorded_cells(recorded)
        assert cells[1:] == [published, f"{float(recorded['predicted_s']):.3f}", error], cells
        assert f"TP {row['tp']}, EP {row['ep']}, NVFP4" in cells[0]
        assert (row["bf16_layers_at_end"], row["fp8_param_gather"]) == ("14", "false")


def test_the_lightning_row_is_quoted_as_recorded():
    """The Super section's sentence on Nemotron 3.5 Lightning quotes its recorded error and
    published step."""
    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    section = page[page.index("## Nemotron 3 Super"):page.index("## NeMo AutoModel")]
    run = next(r for r in published_record() if "lightning" in r)
    error, published = recorded_cells(published_record()[run])[::-1]
    assert f"\n{error} ({published} s published)" in section or \
        f"{error} ({published} s published)" in " ".join(section.split())
