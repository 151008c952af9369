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
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal, NamedTuple

from flowsim.errors import ConfigError, config_error

#: tracked_stats keys holding one training step's time in seconds (v3.1, v4.1, v5.x)
STEP_TIME_KEYS = ("train_step_timing", "train_step_timing in s", "train_step_time")
#: a rank-0 MLLOG line: unprefixed, or behind the launcher's ``"N: "`` rank prefix
_MLLOG = re.compile(r"^\s*(?:(\d+):\s*)?:::MLLOG (.*)$")
#: a result file and its number: ``result_N.txt``, ``result_0N.txt``, ``result_<job>_N.txt``
_RESULT = re.compile(r"result_(?:\S*_)?0*(\d+)\.txt")


class Event(NamedTuple):
    """One MLLOG entry: ``key``, ``time_ms`` (rank-0 host clock), ``value``, ``metadata``."""

    key: str
    time_ms: int
    value: Any
    metadata: dict[str, Any]


class Block(NamedTuple):
    """A block's ``steps``, mean step (s) by the run's timer (``timer_s``), by wall (``wall_s``)."""

    steps: int
    timer_s: float | None
    wall_s: float


class StepTime(NamedTuple):
    """A run's figure: ``seconds``, the ``rule`` used, the ``steps`` and ``files`` it is over."""

    seconds: float
    rule: Literal["per-step", "block timer", "block wall"]
    steps: int
    files: int


class Citation(NamedTuple):
    """Cited files: ``release``, ``commit``, ``directory``, ``numbers`` (None: ``result_*``)."""

    release: str
    commit: str
    directory: str
    numbers: tuple[int, ...] | None


def read_events(text: str, source: str) -> list[Event]:
    """The rank-0 MLLOG entries of one result file, in order.

    A ``:::MLLOG`` line whose rest is not one JSON object with ``key``, ``time_ms`` and
    ``metadata`` (after an optional rank prefix) raises :class:`ConfigError`.

    Parameters
    ----------
    text : str
        The file's contents.
    source : str
        The file's name, for error messages.

    Returns
    -------
    list of Event
        The lines without a rank prefix or with ``0:`` (some launchers print every rank's).
    """
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if ":::MLLOG" not in line:
            continue
        match = _MLLOG.match(line)
        if match and match.group(1) not in (None, "0"):
            continue
        try:
            entry = json.loads(match.group(2) if match else "")  # no match: a ValueError
            events.append(Event(entry["key"], int(entry["time_ms"]), entry.get("value"),
                                dict(entry["metadata"])))
        except (ValueError, TypeError, KeyError):
            raise config_error(f"{source}:{number}", ":::MLLOG", "a JSON object with 'key', "
                               "'time_ms' and 'metadata', after an optional rank prefix "
                               "'N: '", line.strip()) from None
    return events


def _is_summary(event: Event) -> bool:
    # mlperf_common's callbacks log the block summaries; the benchmark's own code the steps
    return "mlperf_common" in PurePosixPath(str(event.metadata.get("file", ""))).parts


def per_step_times(events: Iterable[Event]) -> list[float]:
    """The per-step times (s) of one file's ``tracked_stats``, mlperf_common's block summaries
    left out (they are a block's mean, not a step)."""
    return [float(e.value[key]) for e in events
            if e.key == "tracked_stats" and isinstance(e.value, dict) and not _is_summary(e)
            for key in STEP_TIME_KEYS if key in e.value]


def _logged(events: Sequence[Event], key: str, source: str, why: str) -> float:
    value = next((e.value for e in events if e.key == key), None)
    if not isinstance(value, int | float) or value <= 0:
        raise config_error(source, key, f"a positive MLLOG '{key}' entry ({why})",
                           ... if value is None else value)
    return float(value)


def _progress(event: Event, events: Sequence[Event], source: str) -> float:
    """How far training is at a block event, in steps."""
    meta = event.metadata
    if "step" in meta:  # v5.1: the global step (its samples_count is the block's, not a total)
        return float(meta["step"])
    gbs = _logged(events, "global_batch_size", source, "to count a block's steps")
    if "samples_count" in meta:
        return float(meta["samples_count"]) / gbs
    tokens = meta.get("epoch_num", meta.get("first_epoch_num"))
    if tokens is None:
        raise config_error(source, f"{event.key}.metadata", "a 'step', 'samples_count' or "
                           "'epoch_num' counter", meta)
    sequence = _logged(events, "max_sequence_length", source, "GPT-3 counts tokens")
    return float(tokens) / (gbs * sequence)


def _block_timer(event: Event, events: Sequence[Event], source: str) -> float | None:
    """The run's own mean step of a block from one of its entries, or None."""
    if event.key != "tracked_stats" or not isinstance(event.value, dict):
        return None
    if _is_summary(event) and "train_step_time" in event.value:
        return float(event.value["train_step_time"])
    if "throughput" in event.value:  # samples/s over the block's summed step timers
        gbs = _logged(events, "global_batch_size", source, "to turn throughput into a step")
        return gbs / float(event.value["throughput"])
    return None


def training_blocks(events: Sequence[Event], source: str) -> list[Block]:
    """The complete training blocks of one file: one per ``block_start`` followed by
    ``block_stop`` and ``eval_start`` (not one cut off).

    Parameters
    ----------
    events : sequence of Event
        One file's entries (:func:`read_events`).
    source : str
        The file's name, for error messages.
    """
    blocks = []
    start: Event | None = None
    stop: Event | None = None
    timer: float | None = None
    for event in events:
        if event.key == "block_start":
            start, stop, timer = event, None, None
        elif start is None:
            continue
        elif event.key == "block_stop":
            stop = event
        elif event.key == "eval_start" and stop is not None:
            span = _progress(event, events, source) - _progress(start, events, source)
            steps = round(span)
            if steps < 1 or abs(span - steps) > 1e-6:
                raise config_error(source, "eval_start", "a whole, positive number of steps "
                                   "since the block_start before it", span)
            blocks.append(Block(steps, timer, (stop.time_ms - start.time_ms) / 1000 / steps))
            start = None
        elif stop is None and (logged := _block_timer(event, events, source)) is not None:
            timer = logged
    return blocks


def run_step_time(logs: Mapping[str, str]) -> StepTime:
    """The published step time of one run from its result files, by the module's rule.

    Parameters
    ----------
    logs : mapping of str to str
        File name -> contents, every result file of the run.

    Returns
    -------
    StepTime

    Raises
    ------
    ConfigError
        A malformed MLLOG line, a block of no whole step count, a block timer in only some
        blocks, or neither per-step entries nor a complete block.
    """
    events = {name: read_events(text, name) for name, text in logs.items()}
    steps = {name: per_step_times(ev) for name, ev in events.items()}
    if any(steps.values()):
        values = [t for times in steps.values() for t in times]
        return StepTime(statistics.median(values), "per-step", len(values),
                        sum(1 for times in steps.values() if times))
    blocks = {name: training_blocks(ev, name) for name, ev in events.items()}
    every = [b for found in blocks.values() for b in found]
    if not every:
        raise config_error(", ".join(logs), "tracked_stats", "per-step "
                           f"{'/'.join(STEP_TIME_KEYS)} entries or a complete training block "
                           "(block_start, block_stop, eval_start)", ...)
    timed = {b.timer_s is not None for b in every}
    if len(timed) > 1:
        raise config_error(", ".join(logs), "tracked_stats", "a block timer (train_step_time "
                           "or throughput) in every block or in none", "some blocks without")
    # every step of a block gets the block's value: a median over steps, not over blocks
    median = statistics.median(b.wall_s if b.timer_s is None else b.timer_s
                               for b in every for _ in range(b.steps))
    return StepTime(median, "block timer" if timed == {True} else "block wall",
                    sum(b.steps for b in every), sum(1 for found in blocks.values() if found))


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
