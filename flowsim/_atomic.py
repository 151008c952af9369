"""Atomic output files: a result appears whole or not at all, and never through a symlink.

:func:`atomic_output` hands the writer a temporary path in the target's folder, created
exclusively (``tempfile.mkstemp`` / ``mkdtemp``: an unpredictable name opened with
``O_CREAT | O_EXCL``, so a symlink planted at any guessable name is neither followed nor
overwritten), then flushes it to disk and renames it onto the target (``os.replace``: the
target, even a symlink, is replaced, never written through). If the writer fails, or the
user interrupts it, the temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError, ConfigTypeError, describe


@contextmanager
def atomic_output(path: str | os.PathLike, *, option: str | None = None,
                  directory: bool = False) -> Iterator[Path]:
    """Write a file (or, with ``directory``, a folder such as a zarr store) atomically.

    Parameters
    ----------
    path : path-like
        The target. Its folder must exist.
    option : str, optional
        The command-line option or argument that named the target (``"-o"``), for messages.
    directory : bool
        The writer creates a folder: it gets an empty temporary folder, and an existing
        target folder is replaced as a whole.

    Yields
    ------
    Path
        The temporary path to write to. It ends with the target's extension, so writers that
        choose a format by extension choose the target's.

    Raises
    ------
    ConfigError
        The target's folder does not exist, or the target is a folder (a file, with
        ``directory``), naming ``option``.

    Examples
    --------
    >>> with atomic_output("result.nc", option="-o") as tmp:  # doctest: +SKIP
    ...     dataset.to_netcdf(tmp)
    """
    target = check_target(path, option=option, directory=directory)
    folder = target.parent
    prefix, suffix = f".{target.name}.", target.suffix
    if directory:
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=prefix, suffix=suffix))
    else:
        handle, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
        os.close(handle)
        tmp = Path(name)
    try:
        yield tmp
        if not directory:
            _fsync(tmp)
        _set_mode(tmp, target, directory)
        if directory and target.is_symlink():
            target.unlink()
        elif directory and target.is_dir():
            shutil.rmtree(target)       # os.replace cannot rename onto a non-empty folder
        os.replace(tmp, target)
    except BaseException:
        _remove(tmp)
        raise
    _fsync(folder)  # the rename itself reaches the disk


def check_target(path: str | os.PathLike, *, option: str | None = None,
                 directory: bool = False) -> Path:
    """The target of an output, checked before anything is computed for it: its folder
    exists, and it is not a folder (with ``directory``: not a file).

    Raises
    ------
    ConfigError
        Naming ``option`` (the command-line option or argument that gave the path).
    """
    where = f"argument {option}: " if option else ""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigTypeError(f"{where}expected a file path, found {describe(path)}")
    target = Path(path)
    if not directory and target.is_dir():
        raise ConfigError(f"{where}{target} is a folder, expected a file name")
    if directory and target.exists() and not target.is_dir():
        raise ConfigError(f"{where}{target} exists and is not a folder")
    if not target.parent.is_dir():
        raise ConfigError(f"{where}folder {target.parent} does not exist")
    return target


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *,
                       option: str | None = None) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, option=option) as tmp, open(tmp, "wb") as file:
        file.write(data)


def write_text_atomic(path: str | os.PathLike, text: str, *,
                      option: str | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`."""
    write_bytes_atomic(path, text.encode("utf-8"), option=option)


def refuse_missing_folder(parser: argparse.ArgumentParser, path: str | os.PathLike | None,
                          option: str) -> None:
    """Stop a script at once, through its ``argparse`` parser's one-line error naming
    ``option``, when ``path`` (an output it will write after its work) could not be written
    there; no path, no check."""
    if path is None:
        return
    try:
        check_target(path, option=option)
    except ConfigError as error:
        parser.error(str(error))


def save_figure(figure: Any, path: str | os.PathLike, *, option: str | None = None,
                dpi: int = 110) -> None:
    """Save a matplotlib figure to ``path`` through :func:`atomic_output` (the format from
    the target's extension)."""
    with atomic_output(path, option=option) as tmp:
        figure.savefig(tmp, dpi=dpi)


@functools.cache
def _umask() -> int:
    """The process umask (read once: ``os.umask`` can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _set_mode(tmp: Path, target: Path, directory: bool) -> None:
    """Give the new file the target's permissions, or the usual ones for a new file
    (``mkstemp`` creates it readable by its owner only)."""
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else \
            (0o777 if directory else 0o666) & ~_umask()
        tmp.chmod(mode)
    except OSError:
        pass  # e.g. a file system without permissions: the owner-only mode is fine


def _fsync(path: Path) -> None:
    """Flush a file's (or folder's) content to disk, where the platform allows it."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _remove(tmp: Path) -> None:
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)
