"""Running the points of a sweep: in this process, in worker processes, or on a Dask cluster,
handing finished points to a checkpoint every few seconds.

Ctrl-C (SIGINT, also when sent to the whole process group) stops a run cleanly at any moment:
workers ignore SIGINT, so only this process sees it; it stops the workers, saves the points
finished since the last checkpoint (a second Ctrl-C waits for that write) and raises
:class:`SweepInterrupted` with every finished point.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from ..errors import FlowsimError
from . import run as _run
from .spec import SweepSpec

#: Seconds between two checkpoints of a running sweep: a kill loses at most this much work.
CHECKPOINT_SECONDS = 5.0
#: Points per batch sent to a worker process (small, so that checkpoints are timely).
POINTS_PER_BATCH = 4

Results = dict[int, tuple[tuple, str]]
#: the clock of checkpoints (a name of its own, so that tests can drive it)
_clock = time.monotonic
Checkpoint = Callable[[Results], object]   # its return value is ignored


class SweepInterrupted(FlowsimError):
    """Ctrl-C during a sweep; ``results`` holds the points that finished (and were saved)."""

    def __init__(self, results: Results) -> None:
        super().__init__(f"interrupted after {len(results)} point(s)")
        self.results = results


class _Collector:
    """Finished points, and the ones not yet handed to the checkpoint."""

    def __init__(self, checkpoint: Checkpoint | None, every: float, bar: Any) -> None:
        self.results: Results = {}
        self.fresh: Results = {}
        self.checkpoint = checkpoint
        self.every = every
        self.bar = bar
        self.last = _clock()

    def add(self, out: list[tuple[int, tuple, str]]) -> None:
        for index, values, error in out:
            self.results[index] = self.fresh[index] = (tuple(values), error)
            if self.bar is not None:
                self.bar.update(1)
        if _clock() - self.last >= self.every:
            self.save()

    def save(self) -> None:
        """Hand the fresh points to the checkpoint (Ctrl-C waits until they are written)."""
        if self.checkpoint is not None and self.fresh:
            with interrupts_deferred():
                self.checkpoint(dict(self.fresh))
                self.fresh.clear()
        self.last = _clock()


def compute(spec: SweepSpec, indices: list[int], *, jobs: int = 1, client: Any = None,
            progress: bool = False, max_work: float | None = None,
            checkpoint: Checkpoint | None = None,
            every: float = CHECKPOINT_SECONDS) -> Results:
    """Evaluate ``indices``; returns ``{index: (outputs, error)}``.

    Parameters
    ----------
    jobs : int
        Worker processes (1: this process).
    client : dask.distributed.Client, optional
    max_work : float, optional
        Work budget of each point.
    checkpoint : callable, optional
        Called with the points finished since its last call, at most every ``every`` seconds,
        at the end and on Ctrl-C.

    Raises
    ------
    SweepInterrupted
        On Ctrl-C, with every point finished so far (the unsaved ones checkpointed first).
    """
    bar = _progress(len(indices), progress) if indices else None
    collector = _Collector(checkpoint, every, bar)
    try:
        if client is not None:
            _on_dask(spec, indices, client, max_work, collector)
        elif jobs <= 1:
            for i in indices:
                collector.add(_run.evaluate_batch(spec, [i], max_work))
        else:
            _in_processes(spec, indices, jobs, max_work, collector)
    except KeyboardInterrupt:
        collector.save()
        raise SweepInterrupted(collector.results) from None
    except BaseException:
        collector.save()   # whatever went wrong, the finished points are kept
        raise
    finally:
        if bar is not None:
            bar.close()
    collector.save()
    return collector.results


def _on_dask(spec: SweepSpec, indices: list[int], client: Any, max_work: float | None,
             collector: _Collector) -> None:
    from distributed import as_completed

    cores = max(1, len(client.ncores() or {1: 1}))
    batches = _batches(indices, max(8 * cores, len(indices) // (8 * POINTS_PER_BATCH)))
    futures = client.map(_run.evaluate_batch, [spec] * len(batches), batches,
                         [max_work] * len(batches), pure=False)
    try:
        for future in as_completed(futures):
            collector.add(future.result())
    except KeyboardInterrupt:
        client.cancel(futures)
        raise


def _in_processes(spec: SweepSpec, indices: list[int], jobs: int, max_work: float | None,
                  collector: _Collector) -> None:
    """Small batches, at most two per worker in flight: checkpoints stay timely and a stop
    cancels little."""
    batches = iter(_batches(indices, -(-len(indices) // POINTS_PER_BATCH)))
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_ignore_sigint)
    pending: set[Future] = set()
    try:
        while True:
            for batch in batches:
                pending.add(pool.submit(_run.evaluate_batch, spec, batch, max_work))
                if len(pending) >= 2 * jobs:
                    break
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                collector.add(future.result())
    except BrokenProcessPool:
        _stop(pool)
        raise FlowsimError("a sweep worker process died (out of memory, or killed); the "
                           "finished points are kept: run the same command again") from None
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the workers now (a point can run for minutes; Ctrl-C should not wait for it)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the main process's to handle (no worker tracebacks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT back while the body runs (a checkpoint being written), then raise it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _batches(indices: list[int], n: int) -> list[list[int]]:
    """``n`` interleaved batches (each mixes cheap and expensive corners of the grid)."""
    n = max(1, min(n, len(indices)))
    return [indices[i::n] for i in range(n)]


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="point", desc="flowsim sweep", smoothing=0.1)
