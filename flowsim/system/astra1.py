"""ASTRA-sim 1.0 system files (``key: value`` text) as a :class:`~.config.SystemConfig`.

ASTRA-sim 1.0 (``Sys::initialize_sys``) reads the file as whitespace-separated tokens, taken
in pairs: a key that ends in ``:`` and its value (one token, so trailing spaces and line
breaks do not matter). A later pair overrides an earlier one with the same key; an unknown
key makes ASTRA-sim exit, and is a :class:`~flowsim.errors.ConfigError` here.

Keys, and how they map onto the 2.x keys of :func:`~.config.parse_system_config`:

``scheduling-policy``, ``collective-optimization``, ``endpoint-delay``,
``active-chunks-per-dimension``, ``preferred-dataset-splits``, ``local-reduction-delay``,
``model-shared-bus``
    Same key, same meaning.
``all-reduce-implementation`` (and ``reduce-scatter-``, ``all-gather-``, ``all-to-all-``)
    Algorithms joined by ``_`` (``ring_ring``): the 2.x list. ``direct`` and ``oneDirect``
    may carry a window (``direct4``: at most 4 messages in flight); flowsim always sends to
    every peer at once, ASTRA-sim's behaviour without a window, and warns about a window.
``boost-mode``, ``intra-dimension-scheduling``, ``inter-dimension-scheduling``,
``model-shared-bus``, ``seprate-log``
    Read and checked; a :class:`~flowsim.errors.FlowsimWarning` when the value would change
    ASTRA-sim's results (or reports) and flowsim does not model it. ``L``, ``o``, ``g``,
    ``G`` only parameterise the shared bus, so ``model-shared-bus: 1`` warns for them.

Defaults of absent keys are ASTRA-sim 1.0's where they are documented (``endpoint-delay``
10 and ``active-chunks-per-dimension`` 1 in the validation README; ``local-reduction-delay`` 1,
used with the shared bus only, set by the ``Sys`` constructor) and flowsim's file-absent
defaults otherwise (1 split, LIFO, ``baseline``, ``ring`` in every dimension). ASTRA-sim 1.0
itself exits without the four implementation keys, ``scheduling-policy`` and
``collective-optimization``.

Reductions: ASTRA-sim 1.0's analytical backend gives every NPU a memory of 500000 B/ns and
charges a reduction of ``m`` bytes ``3 * floor(m / 500000)`` ns. That is exactly flowsim's
``local-mem-bw`` of 500000 GB/s (GB = 1e9), which every 1.0 system config gets.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from .._io import read_text
from .._validate import LATENCY_NS, MAX_INT, as_choice, as_number, as_text
from ..errors import ConfigError, config_error, unknown_key_error
from .config import (
    IMPLEMENTATION_KEYS,
    MAX_CHUNKS,
    OPTIMIZATIONS,
    POLICIES,
    SystemConfig,
    parse_system_config,
    warn_not_modelled,
)

#: ``local-mem-bw`` (GB/s, GB = 1e9) equal to the analytical backend's 500000 B/ns memory.
LOCAL_MEM_BW_GBPS = 500_000.0
#: ``local-reduction-delay`` when absent (ASTRA-sim 1.0's constructor default).
LOCAL_REDUCTION_DELAY_NS = 1.0
#: Per-dimension algorithm names ASTRA-sim 1.0 accepts (case-sensitive, as it matches them).
ALGORITHMS = ("ring", "direct", "doubleBinaryTree", "halvingDoubling", "oneRing", "oneDirect",
              "oneHalvingDoubling")
#: ``intra-dimension-scheduling`` and ``inter-dimension-scheduling`` values; the first of each
#: is ASTRA-sim's default and flowsim's behaviour.
INTRA_DIMENSION = ("FIFO", "RG", "SCF", "smallestFirst", "lessRemainingPhaseFirst")
INTER_DIMENSION = ("baseline", "ascending", "themis", "offlineGreedy", "themisFlex",
                   "offlineGreedyFlex", "roundRobin")

_IMPLEMENTATIONS = tuple(key for c, key in IMPLEMENTATION_KEYS.items()
                         if c not in ("broadcast", "reduce"))
_WINDOW = re.compile(r"^(direct|oneDirect)([0-9]{1,9})$")
_LOGGP = ("L", "o", "g", "G")


def _number_token(text: str) -> float:
    """A value token as a number (NaN if it is none: the readers then report it)."""
    try:
        return float(text) if len(text) <= 64 else math.nan
    except ValueError:
        return math.nan


def _whole(text: str, where: str, key: str, minimum: int, maximum: int = MAX_INT) -> int:
    value = _number_token(text)
    if not (math.isfinite(value) and value.is_integer() and minimum <= value <= maximum):
        limit = f" (at most {maximum})" if value > maximum else ""
        raise config_error(where, key, f"a whole number >= {minimum}{limit}", text)
    return int(value)


def _real(text: str, where: str, key: str) -> float:
    return as_number(_number_token(text), source=where, key=key, quantity=LATENCY_NS)


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str, str], str]:
    def parse(text: str, where: str, key: str) -> str:
        return as_choice(text, choices, source=where, key=key)
    return parse


def _algorithms(text: str, where: str, key: str) -> list[str]:
    """``ring_direct8`` -> ``["ring", "direct"]``, warning about the window."""
    names = []
    for i, part in enumerate(p for p in text.split("_") if p):  # empty parts: as strtok
        window = _WINDOW.match(part)
        if window is not None and int(window.group(2)) >= 1:  # _WINDOW: at most 9 digits
            warn_not_modelled(where, f"{key}[{i}]", part, "flowsim's direct sends to every "
                              "peer at once, as ASTRA-sim does without a window",
                              stacklevel=3)
            part = window.group(1)
        if part not in ALGORITHMS:
            raise config_error(where, f"{key}[{i}]", "one of " + ", ".join(ALGORITHMS)
                               + " (direct and oneDirect may end in a window, e.g. direct4)",
                               part)
        names.append(part)
    if not names:
        raise config_error(where, key, "algorithm names joined by '_', e.g. ring_ring", text)
    return names


#: How each key's value token is read (all keys ASTRA-sim 1.0's ``Sys::parse_var`` knows).
_READERS: dict[str, Any] = {
    "scheduling-policy": _one_of(POLICIES),
    "collective-optimization": _one_of(OPTIMIZATIONS),
    "endpoint-delay": partial(_whole, minimum=0, maximum=int(LATENCY_NS.maximum)),
    "local-reduction-delay": _real,
    "active-chunks-per-dimension": partial(_whole, minimum=1, maximum=MAX_CHUNKS),
    "preferred-dataset-splits": partial(_whole, minimum=1, maximum=MAX_CHUNKS),
    **{key: _algorithms for key in _IMPLEMENTATIONS},
    "model-shared-bus": partial(_whole, minimum=0),
    "boost-mode": partial(_whole, minimum=0),
    "intra-dimension-scheduling": _one_of(INTRA_DIMENSION),
    "inter-dimension-scheduling": _one_of(INTER_DIMENSION),
    "seprate-log": partial(_whole, minimum=0),
    **{key: _real for key in _LOGGP},
}
#: Keys read but not modelled: (is the value harmless?, what flowsim does instead).
_NOT_MODELLED: dict[str, tuple[Any, str]] = {
    "boost-mode": (lambda v: v != 1, "flowsim simulates every NPU"),
    "intra-dimension-scheduling": (lambda v: v == "FIFO", "flowsim runs a dimension's queued "
                                   "chunks in FIFO order, ASTRA-sim's default"),
    "inter-dimension-scheduling": (lambda v: v in ("baseline", "ascending"),
                                   "flowsim schedules dimensions in ascending order, "
                                   "ASTRA-sim's default"),
    "model-shared-bus": (lambda v: v != 1, "flowsim charges local-reduction-delay per "
                         "reduction but not the LogGP bus transfers set by L, o, g, G"),
    "seprate-log": (lambda v: v != 0, "it only changes ASTRA-sim's 'total exposed comm' "
                    "report, which flowsim does not produce"),
}
#: 2.x keys that take a 1.0 value as it is.
_PASSED = ("scheduling-policy", "collective-optimization", "endpoint-delay",
           "local-reduction-delay", "active-chunks-per-dimension", "preferred-dataset-splits",
           "model-shared-bus", *_IMPLEMENTATIONS)


def parse_astra1_system(text: str, source: str = "<text>") -> SystemConfig:
    """Validate the text of an ASTRA-sim 1.0 system file and return a :class:`SystemConfig`.

    Parameters
    ----------
    text : str
        The file's content: whitespace-separated ``key: value`` pairs.
    source : str
        The file it came from, for messages.

    Raises
    ------
    ConfigError
        Naming ``source``, the line and the key for an unknown key, a key without a value
        or ``:``, and an unusable value.

    Warns
    -----
    FlowsimWarning
        For a key flowsim reads but does not model, set to a value that matters.

    Examples
    --------
    >>> cfg = parse_astra1_system("endpoint-delay: 10\\nall-reduce-implementation: ring_ring")
    >>> cfg.endpoint_delay_ns, cfg.implementation("all_reduce"), cfg.reduction_ns(1e6)
    (10.0, ('ring', 'ring'), 6.0)
    """
    as_text(text, source=source, what="ASTRA-sim 1.0 system file")
    values: dict[str, Any] = {}
    tokens = [(token, line) for line, row in enumerate(text.splitlines(), 1)
              for token in row.split()]
    known = [key + ":" for key in _READERS]
    for index in range(0, len(tokens), 2):
        token, line = tokens[index]
        where = f"{source}, line {line}"
        key = token[:-1]
        if not token.endswith(":") or key not in _READERS:
            if token in _READERS:
                raise ConfigError(f"{where}: key '{token}' must end with ':' (ASTRA-sim 1.0 "
                                  f"reads whitespace-separated 'key: value' pairs)")
            raise unknown_key_error(where, token, known)
        if index + 1 == len(tokens):
            raise config_error(where, key, "a value after the key", ...)
        values[key] = _READERS[key](tokens[index + 1][0], where, key)
    for key, (harmless, why) in _NOT_MODELLED.items():
        if key in values and not harmless(values[key]):
            warn_not_modelled(source, key, values[key], why, stacklevel=2)
    mapping: dict[str, Any] = {key: values[key] for key in _PASSED if key in values}
    mapping["local-mem-bw"] = LOCAL_MEM_BW_GBPS
    if values.get("model-shared-bus") == 1:
        mapping.setdefault("local-reduction-delay", LOCAL_REDUCTION_DELAY_NS)
    return replace(parse_system_config(mapping, source), phase_barrier=True)


def read_astra1_system(path: str | os.PathLike) -> SystemConfig:
    """Read and validate an ASTRA-sim 1.0 system file (errors name the file)."""
    return parse_astra1_system(read_text(path, "system config"), str(Path(path)))
