"""The accuracy page's table of NeMo 24.07's Llama 2 fine-tuning rows: each row's published
step and flowsim's error as the record (``validation/published/results.csv``) has them, and
the settings the page says the rows take (LoRA rank 32 on QKV alone, packed documents)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import validate_published as vp  # noqa: E402

from conftest import page_table, published_record, recorded_cells  # noqa: E402

#: the page's rows, in its order
RUNS = ("7b_sft_8gpu", "13b_sft_8gpu", "70b_sft_16gpu", "7b_lora_8gpu", "13b_lora_8gpu",
        "70b_lora_8gpu")


def test_the_24_07_fine_tuning_table_is_the_record_s():
    record = published_record()
    rows = {r["run"]: r for r in vp.rows() if r["file"] == "nemo_finetune_2407.csv"}
    table = page_table("NeMo 24.07: Llama 2 fine-tuning", "24.07")
    assert len(table) == len(RUNS) == len(rows)
    for cells, run in zip(table, RUNS):
        name = f"nemo2407_h100_llama2_{run}"
        recorded, row = record[name], rows[name]
        assert cells[1:] == recorded_cells(recorded), cells
        lora = "_lora_" in run
        assert cells[0].startswith("LoRA" if lora else "SFT")
        assert (row["lora_rank"], row["lora_targets"]) == (("32", "linear_qkv") if lora
                                                          else ("", ""))
        assert row["document_tokens"] == "256" and row["sequence"] == "4096"
        assert f"TP {row['tp']}" in cells[0] or row["tp"] == "1"
