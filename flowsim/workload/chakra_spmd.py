"""One rank's Chakra trace run by every NPU (SPMD): the file it is, and how its communicators
map onto the network's NPUs.

A trace captured on one rank of a data- or tensor-parallel job (PyTorch's execution trace of
rank 0, say) describes what every rank does. With ``spmd=True`` every NPU of the network runs
it, and its communicators map onto the NPUs by this rule:

* a collective on the default communicator (no ``pg_name``, ``""`` or ``"0"``) spans every NPU,
  or the dimensions its ``involved_dim`` names;
* a collective on a communicator of the groups file keeps that communicator's *shape*: its
  ranks must be evenly spaced, ``m`` ranks ``s`` apart (a tensor-parallel group of consecutive
  ranks, a data-parallel group of stride ``s``); NPU ``n`` then meets the NPUs of the same
  shape around it, ``c, c + s, ..., c + (m - 1) s`` with ``c = n - ((n // s) % m) * s``, which
  tiles NPUs ``0..N-1`` when ``N`` is a multiple of ``m * s``;
* point-to-point sends and receives name one peer rank, which no rule can carry over to every
  NPU: such a trace needs one file per rank.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .chakra_format import _RANK_FILE, _scan
from .graph import Op, Program


def spmd_trace(prefix_or_dir: str | os.PathLike) -> tuple[Path, Path, int]:
    """The one trace an SPMD run uses: ``(file, prefix, rank)``.

    A file is taken as it is (its rank from a ``<prefix>.<rank>.et`` name, else 0); a prefix
    or folder must hold the trace of exactly one rank.
    """
    given = Path(prefix_or_dir)
    if given.is_file():
        match = _RANK_FILE.match(given.name)
        if match:
            return given, given.parent / match["stem"], int(match["rank"])
        return given, given.with_suffix(""), 0
    if given.is_dir():
        found = sorted({(f.parent / m["stem"], int(m["rank"]), f) for f in given.iterdir()
                        if (m := _RANK_FILE.match(f.name))})
    else:
        found = sorted((given, rank, f) for rank, f in _scan(given).items())
    if len(found) != 1:
        what = f"traces of {len(found)} ranks" if found else "no Chakra trace '<prefix>.<rank>.et'"
        raise ConfigError(f"{given}: SPMD runs one rank's trace on every NPU, and {given} has "
                          f"{what}: give the file to run")
    prefix, rank, file = found[0]
    return file, prefix, rank


def spmd_programs(ops: list[Op], npus: int, source: str) -> list[Program]:
    """The programs of ``npus`` NPUs that each run ``ops`` (see the module docstring): one
    program of every NPU when no collective names a communicator, else one per NPU with its
    communicators mapped."""
    for op in ops:
        if op.kind in ("send", "recv"):
            raise ConfigError(f"{source}: node {op.id} ({op.name or op.kind}): a {op.kind} "
                              f"names one peer rank, so this trace cannot run on every NPU "
                              f"(SPMD); give one trace per rank")
    if not any(op.group for op in ops):
        return [Program(ops, np.arange(npus), source)]
    shapes = {op.group: group_shape(op.group, npus, f"{source}: node {op.id}")
              for op in ops if op.group}
    programs = []
    for npu in range(npus):
        mapped = [replace(op, group=tile(shapes[op.group], npu)) if op.group else replace(op)
                  for op in ops]
        programs.append(Program(mapped, np.array([npu]), f"{source} (NPU {npu})"))
    return programs


def group_shape(group: tuple[int, ...], npus: int, where: str) -> tuple[int, int]:
    """``(m, s)``: a communicator of ``m`` ranks ``s`` apart that tiles ``npus`` NPUs."""
    ranks = sorted(group)
    m = len(ranks)
    s = ranks[1] - ranks[0] if m > 1 else 1
    if any(b - a != s for a, b in zip(ranks, ranks[1:])):
        raise ConfigError(f"{where}: communicator {ranks[:8]} is not evenly spaced ranks; an "
                          f"SPMD run maps a communicator onto the network by its size and "
                          f"stride")
    if npus % (m * s):
        raise ConfigError(f"{where}: communicator {ranks[:8]} ({m} ranks {s} apart) does not "
                          f"tile the network's {npus} NPUs (an SPMD run needs a multiple of "
                          f"{m * s})")
    return m, s


def tile(shape: tuple[int, int], npu: int) -> tuple[int, ...]:
    """The NPUs of the communicator of ``shape`` that holds ``npu``."""
    m, s = shape
    first = npu - ((npu // s) % m) * s
    return tuple(first + i * s for i in range(m))
