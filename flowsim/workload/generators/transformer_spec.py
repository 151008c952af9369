"""The validated arguments of the transformer generator (:mod:`.transformer`).

Every key, its range and the divisibility rules Megatron-LM imposes between them are checked
here, before any graph is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any, Literal

from ..._validate import (
    MAX_INT,
    REQUIRED,
    as_config,
    as_int,
    check_unknown_keys,
    choices_of,
    read_bool,
    read_choice,
    read_int,
    read_list,
)
from ...errors import ConfigError, config_error
from ...topology.network_config import MAX_DIMS, MAX_NPUS
from ..roofline import Roofline, parse_roofline

#: Pipeline schedules (see :func:`~.transformer_graph.pipeline_schedule`).
Schedule = Literal["1f1b", "gpipe"]
SCHEDULES: tuple[Schedule, ...] = choices_of(Schedule)
#: The parallelisms in the order the default mapping gives them dims, innermost first.
Parallelism = Literal["tp", "dp", "pp"]
PARALLELISMS: tuple[Parallelism, ...] = choices_of(Parallelism)
#: An A100-like NPU: 312 TFLOP/s (16-bit tensor cores), 2039 GB/s HBM2e, at half of peak.
A100_ROOFLINE = Roofline(312e12, 2039e9, 0.5)
#: Largest graph a generator builds (ops over all programs), before anything is allocated.
MAX_OPS = 5_000_000
#: Head dimension assumed for the activation memory when ``heads`` is not given.
HEAD_DIM = 128
_REQUIRED = ("layers", "hidden", "sequence", "micro_batch", "micro_batches")
#: Largest value of each integer key: far beyond any model, and small enough that every FLOP
#: and byte count stays finite (``layers`` and ``micro_batches`` are bounded by MAX_OPS).
MAXIMA = {"layers": MAX_INT, "micro_batches": MAX_INT, "hidden": 1 << 24,
          "sequence": 1 << 24, "micro_batch": 1 << 20, "heads": 1 << 24, "ffn": 1 << 26,
          "vocab": 1 << 26, "dtype_bytes": 64, "dp": MAX_NPUS, "tp": MAX_NPUS,
          "pp": MAX_NPUS}


@dataclass(frozen=True, kw_only=True)
class TransformerSpec:
    """Validated arguments of :func:`transformer` (hashable); see its docstring."""

    layers: int
    hidden: int
    sequence: int
    micro_batch: int
    micro_batches: int
    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    schedule: Schedule = "1f1b"
    zero: bool = False
    heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    dtype_bytes: int = 2
    roofline: Roofline = A100_ROOFLINE
    #: ``((parallelism, dims), ...)`` in :data:`PARALLELISMS` order, or None for the default
    dims: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    source: str = field(default="argument", compare=False)


KEYS = tuple(f.name for f in fields(TransformerSpec) if f.name != "source")


def parse_transformer(values: Mapping[str, Any], source: str) -> TransformerSpec:
    """Validate transformer arguments (keys :data:`KEYS`) from ``source``.

    Raises
    ------
    ConfigError
        Naming ``source``, the key, what was expected and what was found.
    """
    as_config(values, source=source, what="transformer")
    check_unknown_keys(values, KEYS, source=source)
    v: dict[str, Any] = {key: _count(values, key, source) for key in _REQUIRED}
    for key in ("dp", "tp", "pp", "dtype_bytes"):
        v[key] = _count(values, key, source, 1 if key != "dtype_bytes" else 2)
    for key in ("heads", "ffn", "vocab"):
        v[key] = None if values.get(key) is None else _count(values, key, source)
    for key in ("sp", "zero"):
        v[key] = read_bool(values, key, source=source, default=False)
    v["schedule"] = read_choice(values, "schedule", SCHEDULES, source=source, default="1f1b",
                                case_insensitive=True)
    v["roofline"] = parse_roofline(values.get("roofline", A100_ROOFLINE), source,
                                   default=A100_ROOFLINE)
    v["dims"] = _parse_dims(values.get("dims"), source)
    spec = TransformerSpec(**v, source=source)
    _check_consistent(spec)
    return spec


def _count(values: Mapping[str, Any], key: str, source: str, default: Any = REQUIRED) -> int:
    """An integer key, >= 1 and at most its :data:`MAXIMA` entry."""
    return read_int(values, key, source=source, default=default, minimum=1,
                    maximum=MAXIMA[key])


def _parse_dims(value: Any, source: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise config_error(source, "dims", "a mapping of tp, dp, pp to lists of network dims, "
                                           "e.g. {tp: [0], dp: [1, 2], pp: [3]}", value)
    used: dict[int, str] = {}
    out = []
    check_unknown_keys(value, PARALLELISMS, source=source, prefix="dims.")
    for name in PARALLELISMS:
        raw = value.get(name, [])
        items = read_list(value, name, partial(as_int, minimum=0, maximum=MAX_DIMS),
                          source=source, prefix="dims.", default=[], scalar=True,
                          max_length=MAX_DIMS, what="a list of network dim indices >= 0")
        for d in items:
            if int(d) in used:
                raise config_error(source, f"dims.{name}",
                                   f"dims not given to another parallelism (dim {d} is "
                                   f"already in dims.{used[int(d)]})", raw)
            used[int(d)] = name
        out.append((name, tuple(sorted(int(d) for d in items))))
    return tuple(out)


def _check_consistent(spec: TransformerSpec) -> None:
    """Divisibility rules between the arguments (Megatron-LM's own requirements)."""
    src = spec.source
    if spec.layers % spec.pp:
        raise config_error(src, "layers", f"a multiple of pp={spec.pp} (every pipeline stage "
                                          f"holds the same number of layers)", spec.layers)
    if spec.hidden % spec.tp:
        raise config_error(src, "hidden", f"a multiple of tp={spec.tp}", spec.hidden)
    if spec.ffn is not None and spec.ffn % spec.tp:
        raise config_error(src, "ffn", f"a multiple of tp={spec.tp}", spec.ffn)
    if spec.heads is not None and (spec.hidden % spec.heads or spec.heads % spec.tp):
        raise config_error(src, "heads", f"a divisor of hidden={spec.hidden} and a multiple "
                                         f"of tp={spec.tp}", spec.heads)
    if spec.sp and spec.sequence % spec.tp:
        raise config_error(src, "sequence", f"a multiple of tp={spec.tp} with sequence "
                                            f"parallelism (sp)", spec.sequence)
    collectives = (8 if spec.sp else 4) if spec.tp > 1 else 0
    ops = spec.micro_batches * (spec.layers * (6 + collectives) + 4 * spec.pp)
    if ops > MAX_OPS:
        raise ConfigError(f"{_where(src)}layers={spec.layers} and micro_batches="
                          f"{spec.micro_batches} make a graph of about {ops} ops, more than "
                          f"{MAX_OPS}")


def _where(source: str) -> str:
    """Message prefix naming the source of a value (none for Python arguments)."""
    return "" if source == "argument" else f"{source}: "


