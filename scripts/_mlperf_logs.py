"""Reading MLPerf Training's MLLOG result files: their events, training blocks and one run's
published step time (the rules of :mod:`mlperf_step_time`'s docstring)."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Literal, NamedTuple

from flowsim.errors import config_error

#: tracked_stats keys holding one training step's time in seconds (v3.1, v4.1, v5.x)
STEP_TIME_KEYS = ("train_step_timing", "train_step_timing in s", "train_step_time")
#: a rank-0 MLLOG line: unprefixed, or behind the launcher's ``"N: "`` rank prefix
_MLLOG = re.compile(r"^\s*(?:(\d+):\s*)?:::MLLOG (.*)$")


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
