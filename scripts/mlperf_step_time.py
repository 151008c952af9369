"""Recompute the published step time of MLPerf Training runs from their MLLOG result files.

    python scripts/mlperf_step_time.py FILE [FILE ...]         # the result files of one run
    python scripts/mlperf_step_time.py --check CSV (--results-root DIR | --git DIR)

The ``published`` column of ``validation/published/mlperf_training.csv`` is a run's median
training step (s), from the MLLOG lines of rank 0 in its ``result_N.txt`` files, by the first
of three rules the files allow:

1. per-step ``tracked_stats`` (``train_step_timing``, ``train_step_timing in s``,
   ``train_step_time``): the median over all entries of all files, without mlperf_common's
   per-block summaries under the same key (their metadata ``file`` is in ``mlperf_common``).
2. the run's block timer: mlperf_common's block ``train_step_time``, else global batch / the
   block's ``throughput``; each step gets its block's value, the median is over the steps.
3. block wall time (``block_stop`` - ``block_start``) / steps, step-weighted as in 2.

A block runs from ``block_start`` to the next ``eval_start``; its steps are the difference of
the global ``step`` (v5.1), else of ``samples_count`` / global batch, else of GPT-3's tokens
``epoch_num`` / (global batch x sequence). A file without a complete block adds nothing.

``--check CSV`` recomputes each row from the files its ``citation`` names and prints row,
published, recomputed, agree/differ (at the digits the CSV prints), or "failed" and why; it
exits with 1 if a row differs or fails. DIR holds the checkouts ``training_results_vX.Y/``
or, with ``--git``, the bare mirrors ``mlcommons+training_results_vX.Y/repo`` (read at the
cited commit).
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _mlperf_logs import (  # noqa: E402  (the scripts folder on the path first)
    STEP_TIME_KEYS,
    Block,
    Event,
    StepTime,
    per_step_times,
    read_events,
    run_step_time,
    training_blocks,
)

from flowsim.errors import ConfigError, config_error  # noqa: E402

__all__ = ["STEP_TIME_KEYS", "Block", "Citation", "Event", "StepTime", "agrees", "check",
           "main", "parse_citation", "per_step_times", "read_events", "run_step_time",
           "training_blocks"]

#: a result file and its number: ``result_N.txt``, ``result_0N.txt``, ``result_<job>_N.txt``
_RESULT = re.compile(r"result_(?:\S*_)?0*(\d+)\.txt")


class Citation(NamedTuple):
    """Cited files: ``release``, ``commit``, ``directory``, ``numbers`` (None: ``result_*``)."""

    release: str
    commit: str
    directory: str
    numbers: tuple[int, ...] | None




def parse_citation(text: str, source: str = "citation") -> Citation:
    """The result files a CSV row's ``citation`` names; :class:`ConfigError` if it lacks the
    release, a 40-digit commit or a ``.../results/.../result_`` path.

    Parameters
    ----------
    text : str
        E.g. ``"mlcommons/training_results_v3.1 (git d06288b...), NVIDIA/results/eos_n64/gpt3/
        result_0.txt, result_1.txt (MLLOG ...)"``, or ``result_*.txt``, ``result_0..2.txt``.
    source : str
        Where the text is from, for error messages.

    Returns
    -------
    Citation
    """
    release = re.search(r"training_results_(v\d+\.\d+)", text)
    commit = re.search(r"\b[0-9a-f]{40}\b", text)
    files = re.search(r"([\w.+-]+/results/\S+?)/(result_[^(;]*)", text)
    if not (release and commit and files):
        raise config_error(source, "citation", "'training_results_vX.Y', a 40-digit git commit "
                           "and a path 'ORG/results/SYSTEM/BENCHMARK/result_...'", text[:80])
    spec = re.sub(r"(?<=result_)[\w-]*_(?=\d+\.txt)", "", files.group(2))  # a job's stamp
    numbers = [int(n) for n in re.findall(r"\d+", spec)]
    if ".." in spec:  # a range, first .. last
        numbers = list(range(numbers[0], numbers[-1] + 1))
    return Citation(release.group(1), commit.group(0), files.group(1),
                    None if "*" in spec else tuple(numbers))


class ResultsTree:
    """The files of one ``training_results_vX.Y``: a checkout, or a bare mirror at ``commit``."""

    def __init__(self, root: Path, commit: str | None = None) -> None:
        self.root, self.commit = root, commit

    def _git(self, *args: str) -> str | None:
        done = subprocess.run(["git", f"--git-dir={self.root}", *args], capture_output=True,
                              text=True, errors="replace")
        return None if done.returncode else done.stdout

    def names(self, directory: str) -> list[str]:
        """The file names in ``directory`` (none if it does not exist)."""
        if self.commit is None:
            folder = self.root / directory
            return [p.name for p in folder.iterdir()] if folder.is_dir() else []
        return (self._git("ls-tree", "--name-only", f"{self.commit}:{directory}") or "").split()

    def read(self, path: str) -> str:
        """The text of the file at ``path``."""
        if self.commit is None:
            file = self.root / path
            text = file.read_text(errors="replace") if file.is_file() else None
        else:  # also a blob the mirror lists but does not hold (large files may be absent)
            text = self._git("cat-file", "blob", f"{self.commit}:{path}")
        if text is None:
            at = f" at {self.commit[:12]}" if self.commit else ""
            raise ConfigError(f"{self.root / path}{at}: no such result file")
        return text


def cited_logs(citation: Citation, tree: ResultsTree) -> dict[str, str]:
    """The text of each result file a citation names, by path, in file-number order: all of
    its folder's (``result_*``), or one per number it lists (none or two is an error)."""
    numbered: dict[int, list[str]] = {}
    for name in sorted(tree.names(citation.directory)):
        if match := _RESULT.fullmatch(name):
            numbered.setdefault(int(match.group(1)), []).append(name)
    names = [n for number in sorted(numbered) for n in numbered[number]]
    for number in citation.numbers or ():
        if len(found := numbered.get(number, [])) != 1:
            raise ConfigError(f"{tree.root / citation.directory}: result file {number}: "
                              f"expected one, found {', '.join(found) or 'none'}")
    if citation.numbers is not None:
        names = [numbered[number][0] for number in citation.numbers]
    if not names:
        raise ConfigError(f"{tree.root / citation.directory}: no result_*.txt files")
    return {path: tree.read(path) for path in (f"{citation.directory}/{n}" for n in names)}


def agrees(published: str, seconds: float) -> bool:
    """Whether ``seconds`` rounds to ``published`` at the digits the CSV prints."""
    digits = len(published.partition(".")[2])
    return f"{seconds:.{digits}f}" == published


def check(table: Path, root: Path, git: bool = False) -> int:
    """Recompute every row of ``table`` (a CSV with ``run``, ``published`` and ``citation``)
    from the ``training_results_vX.Y/`` checkouts in ``root`` (with ``git``: its bare mirrors
    ``mlcommons+training_results_vX.Y/repo``, read at the cited commit) and print the
    comparison; the exit status: 0 if every row agrees, 1 if one differs or fails."""
    if not table.is_file():
        raise ConfigError(f"{table}: no such file")
    with table.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not {"run", "published", "citation"} <= rows[0].keys():
        raise config_error(str(table), "columns", "rows with run, published and citation",
                           sorted(rows[0]) if rows else "no rows")
    width = max(len(row["run"]) for row in rows)
    agreed = 0
    for row in rows:
        try:
            citation = parse_citation(row["citation"], f"{table}: row {row['run']}")
            name = f"training_results_{citation.release}"
            tree = (ResultsTree(root / f"mlcommons+{name}" / "repo", citation.commit) if git
                    else ResultsTree(root / name))
            found = run_step_time(cited_logs(citation, tree))
        except ConfigError as error:
            print(f"{row['run']:<{width}}  {row['published']:>9}  {'-':>10}  failed   {error}")
            continue
        ok = agrees(row["published"], found.seconds)
        agreed += ok
        print(f"{row['run']:<{width}}  {row['published']:>9}  {found.seconds:>10.6g}  "
              f"{'agree' if ok else 'differ':7}  {found.rule}, {found.steps} steps of "
              f"{found.files} files")
    print(f"{agreed} of {len(rows)} rows agree")
    return 0 if agreed == len(rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one run's files, or ``--check`` a CSV (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="every result file of one run")
    parser.add_argument("--check", type=Path, metavar="CSV",
                        help="recompute the published column of CSV from its citations")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--results-root", type=Path, metavar="DIR",
                       help="DIR holds training_results_vX.Y/ checkouts")
    where.add_argument("--git", type=Path, metavar="DIR",
                       help="DIR holds bare mirrors mlcommons+training_results_vX.Y/repo")
    args = parser.parse_args(argv)
    root = args.git or args.results_root
    if (args.check is None) == (not args.files) or (args.check and root is None):
        parser.error("name the result files of one run, or --check CSV with --results-root/--git")
    try:
        if args.check is not None:
            return check(args.check, root, args.git is not None)
        for path in args.files:
            if not path.is_file():
                raise ConfigError(f"{path}: no such result file")
        found = run_step_time({str(p): p.read_text(errors="replace") for p in args.files})
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{found.seconds:.6g} s  ({found.rule}: median over {found.steps} steps of "
          f"{found.files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
