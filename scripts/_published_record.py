"""The published-run record (``validation/published/results.csv``): what
``validate_published.py`` writes and reads back (its CSV, Markdown table and plot), and what
``published_scaling.py`` and ``published_slopes.py`` read (a module of theirs, not a script).

``results`` below are ``(row, published s, predicted s, error)`` per run, the row a source
CSV's; ``memory`` maps a run to its memory estimate and its GPU's memory (GiB).
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from flowsim._atomic import atomic_output, save_figure

#: the recorded predictions (``--csv`` of a full run), beside the publications' rows
RECORD = Path(__file__).resolve().parent.parent / "validation" / "published" / "results.csv"
#: the columns of a record
COLUMNS = ("run", "file", "gpus", "model", "published_s", "predicted_s", "error", "memory_gib",
           "gpu_memory_gib")
#: a run's predicted seconds, memory estimate and GPU memory (GiB; None: not recorded)
Prediction = tuple[float, "float | None", "float | None"]


def recorded() -> dict[str, dict[str, str]]:
    """The record's rows by run."""
    with RECORD.open(newline="") as handle:
        return {r["run"]: r for r in csv.DictReader(handle)}


def write_csv(path: str, results: list, memory: dict[str, tuple[float, float]],
              models: dict[str, str]) -> None:
    """``results`` as a record, whole or not at all (a crash leaves the last one be);
    ``models``: the network model each run was predicted with."""
    with atomic_output(path, option="--csv") as tmp, open(tmp, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(COLUMNS)
        for row, published, predicted, error in results:
            estimate: tuple = memory.get(row["run"], ("", ""))
            out.writerow([row["run"], row["file"], row["gpus"], models[row["run"]],
                          f"{published:.6g}", f"{predicted:.6g}", f"{error:.4f}", *estimate])


def read_predictions(paths: list[str]) -> dict[str, Prediction]:
    """Predicted seconds, and the memory estimate and the GPU's memory (GiB; None in a CSV
    written before they were recorded), by run, from CSVs :func:`write_csv` wrote.

    Raises
    ------
    ValueError
        A file that is missing or is no such CSV (naming it), or a run two of them hold.
    """
    out: dict[str, Prediction] = {}
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
        with open(path, newline="") as handle:
            for number, r in enumerate(csv.DictReader(handle), start=2):
                try:
                    memory, capacity = (float(r[k]) if r.get(k) else None
                                        for k in ("memory_gib", "gpu_memory_gib"))
                    prediction = (float(r["predicted_s"]), memory, capacity)
                except (KeyError, TypeError, ValueError):
                    raise ValueError(f"{path}:{number}: expected a row of run, predicted_s "
                                     "and the memory columns (a CSV written with --csv)"
                                     ) from None
                if r["run"] in out:   # two parts of one run would join into either
                    raise ValueError(f"{path}: run {r['run']} is also in an earlier CSV")
                out[r["run"]] = prediction
    return out


def memory_summary(memory: dict[str, tuple[float, float]]) -> str:
    """How many runs the memory estimate fits in their GPUs' memory."""
    fits = sum(peak <= capacity for peak, capacity in memory.values())
    return (f"Memory estimate within the GPU's memory: {fits} of {len(memory)} runs "
            f"({len(memory) - fits} above it).")


def markdown(results: list, memory: dict[str, tuple[float, float]]) -> str:
    """The comparison as a Markdown table, one row per run, with its source."""
    lines = ["| run | GPUs | TP-PP-DP-CP (VPP) | published s | predicted s | error | source |",
             "|---|---:|---|---:|---:|---:|---|"]
    for row, published, predicted, error in results:
        vpp = f" ({row['vpp']})" if int(row["vpp"] or 1) > 1 else ""
        ep = f" EP {row['ep']}" if int(row["ep"] or 1) > 1 else ""
        layout = "-".join(row[k] or "1" for k in ("tp", "pp", "dp", "cp")) + vpp + ep
        source = f"`{row['file']}`"   # each row of the file cites its page and table
        lines.append(f"| {row['run']} | {int(row['gpus']):,} | {layout} | {published:.3f} | "
                     f"{predicted:.3f} | {100 * error:+.1f}% | {source} |")
    errors = sorted(abs(e) for *_, e in results)
    lines.append("")
    lines.append(f"{len(errors)} runs: median |error| {100 * statistics.median(errors):.1f}%, "
                 f"max {100 * errors[-1]:.1f}%, within 10%: "
                 f"{sum(e <= 0.10 for e in errors)} of {len(errors)}.")
    if len(memory) == len(results):
        lines += ["", memory_summary(memory)]
    return "\n".join(lines) + "\n"


def plot(results: list, path: str) -> None:
    """Predicted against published times, log-log, a colour and marker per source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    files = sorted({row["file"] for row, *_ in results})
    for i, name in enumerate(files):   # ten colours, so a marker per ten sources besides
        mine = [(p, q) for row, p, q, _ in results if row["file"] == name]
        ax.scatter([p for p, _ in mine], [q for _, q in mine], label=name.removesuffix(".csv"),
                   zorder=3, s=16, marker="os^D"[i // 10 % 4], color=f"C{i % 10}")
    low = min(min(p, q) for _, p, q, _ in results) * 0.8
    high = max(max(p, q) for _, p, q, _ in results) * 1.25
    ax.plot([low, high], [low, high], "k-", lw=0.8)
    ax.fill_between([low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1],
                    color="0.85", label="±10%")
    ax.set(xscale="log", yscale="log", xlabel="published iteration time (s)",
           ylabel="flowsim predicted (s)", title="flowsim against published training runs")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.tight_layout()
    save_figure(fig, path, option="--plot", dpi=120)
