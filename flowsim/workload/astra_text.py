"""ASTRA-sim's text workload format (the 1.0 training-loop files).

Line 1 is the parallelism keyword (and for some, parameters), line 2 the layer count, then one
line per layer of whitespace-separated fields::

    name  reserved  fwd_compute fwd_type fwd_bytes  ig_compute ig_type ig_bytes
          wg_compute wg_type wg_bytes  update_delay  [parallelism, HYBRID_CUSTOMIZED only]

Compute values are cycles of ASTRA-sim's 1 GHz clock, i.e. **ns**; ``flowsim.simulate``'s
``compute_scale`` multiplies them (use it for another clock: a 2 GHz part takes
``compute_scale=0.5``), ``comm_scale`` multiplies the byte counts, as ASTRA-sim's
``--compute-scale`` and ``--comm-scale`` do. Comm types are ``ALLREDUCE``, ``ALLTOALL``,
``ALLGATHER``, ``REDUCESCATTER`` or ``NONE`` (no collective); ASTRA-sim reads any other word as
``NONE``, flowsim reports it, since it is almost always a typo.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .._io import read_text
from .._validate import DURATION_NS, SIZE_BYTES, as_text
from ..errors import ConfigError, describe
from ..topology.network_config import MAX_NPUS

PARALLELISMS = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
                "HYBRID_DLRM_ENHANCED", "HYBRID_TRANSFORMER",
                "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED", "MICRO",
                "DISTRIBUTED_INFERENCE")
COMM_TYPES = {"ALLREDUCE": "all_reduce", "ALLTOALL": "all_to_all", "ALLGATHER": "all_gather",
              "REDUCESCATTER": "reduce_scatter"}
#: layer parallelism keywords accepted in a HYBRID_CUSTOMIZED 13th field
LAYER_POLICIES = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA")


@dataclass(frozen=True)
class TextLayer:
    """One layer line; compute in ns, bytes."""

    name: str
    fwd_compute: float
    fwd_type: str | None
    fwd_bytes: int
    ig_compute: float
    ig_type: str | None
    ig_bytes: int
    wg_compute: float
    wg_type: str | None
    wg_bytes: int
    update_delay: float
    policy: str = ""


@dataclass(frozen=True)
class TextWorkload:
    """A parsed text workload.

    Attributes
    ----------
    parallelism : str
    layers : tuple of TextLayer
    model_parallel_group : int
        ``HYBRID_TRANSFORMER*``: NPUs of one model-parallel group.
    last_bottom_layer : int
        ``HYBRID_DLRM*``: ``DLRM_LAST_BOTTOM_LAYER``.
    checkpoints, checkpoint_initiates : tuple of int
        ``HYBRID_TRANSFORMER_FWD_IN_BCKWD``: activation-checkpoint layers and the layers whose
        backward pass recomputes the forward from the previous checkpoint.
    source : str
    """

    parallelism: str
    layers: tuple[TextLayer, ...]
    model_parallel_group: int = 1
    last_bottom_layer: int = -1
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    source: str = "<text>"


def _number(token: str, source: str, line: int, field: str, *, integer: bool) -> float:
    """A non-negative number (compute, ns; at most :data:`~flowsim._validate.DURATION_NS`)
    or integer (bytes, counts; at most :data:`~flowsim._validate.SIZE_BYTES`)."""
    kind = "a non-negative integer" if integer else "a non-negative number"
    value = math.nan
    if len(token) <= 64:  # no 4000-digit numbers: Python refuses to read them
        try:
            if not integer:
                value = float(token)
            elif token.lstrip("+").isdigit():
                value = int(token)
        except ValueError:
            pass
    if value != value:
        raise ConfigError(f"{source}:{line}: {field} must be {kind}, found {describe(token)}")
    if value < 0:
        raise ConfigError(f"{source}:{line}: {field} must be non-negative, found "
                          f"{describe(token)}")
    limit = SIZE_BYTES.maximum if integer else DURATION_NS.maximum
    if value > limit:
        raise ConfigError(f"{source}:{line}: {field} must be at most {limit:g}, found "
                          f"{describe(token)}")
    return value


def _header(tokens: list[str], source: str) -> dict:
    """Parameters after the parallelism keyword on line 1."""
    keyword = tokens[0]
    out: dict = {}
    rest = tokens[1:]
    if keyword.startswith("HYBRID_TRANSFORMER"):
        if len(rest) < 2:
            raise ConfigError(f"{source}:1: {keyword} needs 'model_parallel_NPU_group: N'")
        out["model_parallel_group"] = int(_number(rest[1], source, 1,
                                                  "model_parallel_NPU_group", integer=True))
        if not 1 <= out["model_parallel_group"] <= MAX_NPUS:
            raise ConfigError(f"{source}:1: model_parallel_NPU_group must be in 1..{MAX_NPUS}, "
                              f"found {out['model_parallel_group']}")
        rest = rest[2:]
        if keyword.endswith("FWD_IN_BCKWD"):
            for name in ("checkpoints", "checkpoint_initiates"):
                if not rest or rest[0].rstrip(":") != name:
                    raise ConfigError(f"{source}:1: {keyword} needs '{name}: n l1 .. ln'")
                count = int(_number(rest[1], source, 1, name, integer=True)) if len(rest) > 1 \
                    else -1
                values = rest[2: 2 + count]
                if count < 0 or len(values) != count:
                    raise ConfigError(f"{source}:1: '{name}:' announces {count} layers but "
                                      f"lists {len(values)}")
                out[name] = tuple(int(_number(v, source, 1, name, integer=True))
                                  for v in values)
                rest = rest[2 + count:]
    elif keyword.startswith("HYBRID_DLRM"):
        if not rest:
            raise ConfigError(f"{source}:1: {keyword} needs DLRM_LAST_BOTTOM_LAYER (an int)")
        out["last_bottom_layer"] = int(_number(rest[0], source, 1, "DLRM_LAST_BOTTOM_LAYER",
                                               integer=True))
        rest = rest[1:]
    if rest:
        raise ConfigError(f"{source}:1: unexpected tokens after {keyword}: {rest}")
    return out


def parse_astra_text(text: str, source: str = "<text>") -> TextWorkload:
    """Parse a text workload (see the module docstring).

    Raises
    ------
    ConfigError
        Unknown parallelism keyword, a layer line with the wrong number of fields, a number
        that is not a non-negative number (compute) or integer (bytes), a layer count that does
        not match the lines; the message names the file and line.
    """
    as_text(text, source=source, what="text workload")
    lines = [(i + 1, line.split()) for i, line in enumerate(text.splitlines())]
    lines = [(n, t) for n, t in lines if t]
    if not lines:
        raise ConfigError(f"{source}: empty workload file")
    keyword = lines[0][1][0]
    if keyword not in PARALLELISMS:
        raise ConfigError(f"{source}:{lines[0][0]}: unknown parallelism keyword {keyword!r} "
                          f"(expected one of {', '.join(PARALLELISMS)})")
    header = _header(lines[0][1], source)
    if len(lines) < 2 or len(lines[1][1]) != 1:
        raise ConfigError(f"{source}:2: expected the number of layers on its own line")
    count = int(_number(lines[1][1][0], source, lines[1][0], "layer count", integer=True))
    body = lines[2:]
    if len(body) != count:
        raise ConfigError(f"{source}: the header announces {count} layers, the file has "
                          f"{len(body)} layer lines")
    fields = 13 if keyword == "HYBRID_CUSTOMIZED" else 12
    layers = []
    for n, tokens in body:
        if len(tokens) != fields:
            raise ConfigError(f"{source}:{n}: a {keyword} layer line has {fields} fields, "
                              f"found {len(tokens)}")
        names = ("fwd", "ig", "wg")
        values: dict[str, Any] = {}
        for k, name in enumerate(names):
            base = 2 + 3 * k
            values[f"{name}_compute"] = _number(tokens[base], source, n,
                                                f"{name} compute", integer=False)
            values[f"{name}_type"] = COMM_TYPES.get(tokens[base + 1])
            if tokens[base + 1] == "ALLREDUCEALLTOALL":
                raise ConfigError(f"{source}:{n}: ALLREDUCEALLTOALL is parsed by ASTRA-sim "
                                  "but never run (it panics); use ALLREDUCE or ALLTOALL")
            if tokens[base + 1] not in COMM_TYPES and tokens[base + 1] != "NONE":
                raise ConfigError(f"{source}:{n}: {name} comm type must be one of "
                                  f"{', '.join(COMM_TYPES)} or NONE, found {tokens[base + 1]!r}")
            values[f"{name}_bytes"] = int(_number(tokens[base + 2], source, n,
                                                  f"{name} comm size", integer=True))
        delay = _number(tokens[11], source, n, "update delay", integer=False)
        policy = ""
        if keyword == "HYBRID_CUSTOMIZED":
            policy = tokens[12]
            if policy not in LAYER_POLICIES:
                raise ConfigError(f"{source}:{n}: layer parallelism must be one of "
                                  f"{', '.join(LAYER_POLICIES)}, found {policy!r}")
        layers.append(TextLayer(tokens[0], update_delay=delay, policy=policy, **values))
    _check_layer_indices(header, count, keyword, source)
    return TextWorkload(keyword, tuple(layers), source=source, **header)


def _check_layer_indices(header: dict, count: int, keyword: str, source: str) -> None:
    """Layer indices on line 1 (DLRM's last bottom layer, checkpoints) name existing layers:
    ASTRA-sim would silently never reach a layer past the end."""
    named = [("DLRM_LAST_BOTTOM_LAYER", header.get("last_bottom_layer"))]
    named += [(name, i) for name in ("checkpoints", "checkpoint_initiates")
              for i in header.get(name, ())]
    for name, index in named:
        if index is not None and not 0 <= index < count:
            raise ConfigError(f"{source}:1: {keyword} {name} {index} is not a layer of this "
                              f"workload (layers 0..{count - 1})")


def read_astra_text(path: str | os.PathLike) -> TextWorkload:
    """Read a text workload file (see :func:`parse_astra_text`)."""
    return parse_astra_text(read_text(path, "workload"), str(path))
