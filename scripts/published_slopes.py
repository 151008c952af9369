"""Split LLM Foundry's published MPT step times into attention and the rest, and compare.

    python scripts/published_slopes.py [--max-sequence 8192]

At a fixed model, GPU and recomputation, a step's time per token is ``a + b s`` in the
sequence length ``s``: causal attention costs per token in proportion to ``s``, everything
else (GEMMs, elementwise work, the cross entropy, communication left exposed) does not. A
least-squares line through the 8-GPU rows of one model at several lengths (LLM Foundry's
tables give each at 512 to 65,536 tokens) separates the two from the published figures alone;
the same line through flowsim's recorded predictions of those rows
(``validation/published/results.csv``) says which part the model prices high or low. No
constant of flowsim's comes from this: it reads the recorded predictions, it sets nothing.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import _published_record as record
import numpy as np
import validate_published as vp


def slopes(max_sequence: int) -> list[tuple[tuple[str, str, str], int, float, float, float,
                                            float]]:
    """Per (model, device, recomputation) with three lengths or more: the rows, and ``a``
    (microseconds per token) and ``b`` (microseconds per token per 1,000 tokens of sequence),
    published and predicted."""
    recorded = record.recorded()
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = defaultdict(list)
    for row in vp.rows("mosaic_mpt_"):
        if row["gpus"] == "8" and row["dtype"] == "bf16" and \
                int(row["sequence"]) <= max_sequence:
            groups[row["run"].split("_")[2], row["device"], row["recompute"]].append(row)
    out = []
    for key, rows in sorted(groups.items()):
        if len(rows) < 3:
            continue
        seq = np.array([float(r["sequence"]) for r in rows])
        tokens = np.array([float(r["global_batch"]) * float(r["sequence"]) / 8 for r in rows])
        design = np.vstack([np.ones_like(seq), seq / 1000]).T
        fits = []
        for column in ("published_s", "predicted_s"):
            per_token = np.array([float(recorded[r["run"]][column]) for r in rows]) / tokens
            fits.append(np.linalg.lstsq(design, per_token * 1e6, rcond=None)[0])
        (a_pub, b_pub), (a_pred, b_pred) = fits
        out.append((key, len(rows), a_pub, b_pub, a_pred, b_pred))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-sequence", type=int, default=8192,
                        help="longest sequence of the rows fitted (default 8192)")
    args = parser.parse_args()
    print("| model | GPU | recomputation | rows | rest: flowsim / published | "
          "attention: flowsim / published |")
    print("|---|---|---|---:|---:|---:|")
    for (model, device, recompute), n, a_pub, b_pub, a_pred, b_pred in slopes(
            args.max_sequence):
        print(f"| {model} | {device} | {recompute} | {n} | {a_pred / a_pub:.2f} | "
              f"{b_pred / b_pub:.2f} |")


if __name__ == "__main__":
    main()
