"""ASTRA-sim's text workload format (the 1.0 training-loop files).

Line 1 is the parallelism keyword (and for some, parameters), line 2 the layer count, then one
line per layer of whitespace-separated fields::

    name  reserved  fwd_compute fwd_type fwd_bytes  ig_compute ig_type ig_bytes
          wg_compute wg_type wg_bytes  update_delay  [parallelism, HYBRID_CUSTOMIZED only]

Compute values are cycles of ASTRA-sim's 1 GHz clock, i.e. **ns**; ``flowsim.simulate``'s
``compute_scale`` multiplies them (use it for another clock: a 2 GHz part takes
``compute_scale=0.5``), ``comm_scale`` multiplies the byte counts, as ASTRA-sim's
``--compute-scale`` and ``--comm-scale`` do. Comm types are ``ALLREDUCE``, ``ALLTOALL``,
``ALLGATHER``, ``REDUCESCATTER`` (SimAI adds ``_EP`` and ``_DP_EP`` forms) or ``NONE`` (no
collective); ``BROADCAST`` is no communication, as in ASTRA-sim 1.0 and SimAI; ASTRA-sim reads
any other word as ``NONE``, flowsim reports it, since it is almost always a typo. The
``HYBRID_TRANSFORMER`` header keys of ASTRA-sim 1.0 and SimAI / aicb are read in any order
(:mod:`.text_header`).

A file announcing more layers than it holds (aicb's ``L65B-M1-C05`` announces 839 and holds
33) runs the layer lines it holds, with a warning: SimAI would read past the end of the file.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass

from .._io import read_text
from .._validate import DURATION_NS, SIZE_BYTES, as_text
from ..errors import ConfigError, FlowsimWarning, describe
from .text_header import COLLECTIVE_TOKENS, comm_token, transformer_header

PARALLELISMS = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
                "HYBRID_DLRM_ENHANCED", "HYBRID_TRANSFORMER",
                "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED", "MICRO",
                "DISTRIBUTED_INFERENCE")
COMM_TYPES = COLLECTIVE_TOKENS
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
    #: the groups of the fwd / ig / wg collectives: "" (the column's own), "EP" or "DP_EP"
    fwd_group: str = ""
    ig_group: str = ""
    wg_group: str = ""


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
    expert_parallel_group : int
        SimAI's ``ep:``: consecutive model-parallel groups of one expert-parallel group.
    all_gpus : int or None
        SimAI's ``all_gpus:``, the job the file was written for (None: not given).
    source : str
    """

    parallelism: str
    layers: tuple[TextLayer, ...]
    model_parallel_group: int = 1
    last_bottom_layer: int = -1
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    expert_parallel_group: int = 1
    all_gpus: int | None = None
    source: str = "<text>"


#: an integer, also written with a zero fraction (``8388608.0``)
_INTEGRAL = re.compile(r"\+?[0-9]+(?:\.0*)?")


def _number(token: str, source: str, line: int, field: str, *, integer: bool) -> float:
    """A non-negative number (compute, ns; at most :data:`~flowsim._validate.DURATION_NS`)
    or integer (bytes, counts; at most :data:`~flowsim._validate.SIZE_BYTES`)."""
    kind = "a non-negative integer" if integer else "a non-negative number"
    value = math.nan
    if len(token) <= 64:  # no 4000-digit numbers: Python refuses to read them
        try:
            if not integer:
                value = float(token)
            elif _INTEGRAL.fullmatch(token):   # aicb writes some counts as "8388608.0"
                value = int(token.partition(".")[0])
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
        def whole(token: str, key: str) -> int:
            return int(_number(token, source, 1, key, integer=True))

        found = transformer_header(keyword, rest, source, whole)
        out["model_parallel_group"] = found["model_parallel_NPU_group"]
        out["expert_parallel_group"] = found.get("ep", 1)
        out["all_gpus"] = found.get("all_gpus")
        for name in ("checkpoints", "checkpoint_initiates"):
            out[name] = found.get(name, ())
        if found.get("pp", 1) > 1:
            warnings.warn(f"{source}:1: key 'pp' = {found['pp']} is not modelled: as SimAI "
                          f"does, flowsim folds pipeline stages into data parallelism and "
                          f"runs no pipeline traffic (SimAI uses pp, vpp, ga and pp_comm only "
                          f"in its end-of-run report)", FlowsimWarning, stacklevel=4)
        rest = []
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
        that is not a non-negative number (compute) or integer (bytes), more layer lines than
        the header announces; the message names the file and line.

    Warns
    -----
    FlowsimWarning
        Fewer layer lines than announced (the present ones run), BROADCAST columns (no
        communication), SimAI header keys that would matter and are not modelled.
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
    if len(body) > count:
        raise ConfigError(f"{source}: the header announces {count} layers, the file has "
                          f"{len(body)} layer lines")
    if len(body) < count:
        warnings.warn(f"{source}:2: the header announces {count} layers, the file holds "
                      f"{len(body)} layer lines; running those (SimAI would read past the end "
                      f"of the file)", FlowsimWarning, stacklevel=2)
    broadcasts: list[int] = []
    layers = [_layer(tokens, n, keyword, source, broadcasts) for n, tokens in body]
    if broadcasts:
        warnings.warn(f"{source}: {len(broadcasts)} BROADCAST column(s) (line "
                      f"{', '.join(map(str, broadcasts[:5]))}"
                      f"{' ...' if len(broadcasts) > 5 else ''}) run no communication, as in "
                      f"ASTRA-sim 1.0 and SimAI, which read BROADCAST as NONE",
                      FlowsimWarning, stacklevel=2)
    _check_layer_indices(header, len(layers), keyword, source)
    return TextWorkload(keyword, tuple(layers), source=source, **header)


def _layer(tokens: list[str], n: int, keyword: str, source: str,
           broadcasts: list[int]) -> TextLayer:
    """One layer line (line ``n``); the lines of BROADCAST columns are added to
    ``broadcasts``."""
    fields = 13 if keyword == "HYBRID_CUSTOMIZED" else 12
    if len(tokens) != fields:
        raise ConfigError(f"{source}:{n}: a {keyword} layer line has {fields} fields, "
                          f"found {len(tokens)}")
    values: dict = {}
    for k, name in enumerate(("fwd", "ig", "wg")):
        base = 2 + 3 * k
        values[f"{name}_compute"] = _number(tokens[base], source, n, f"{name} compute",
                                            integer=False)
        token = comm_token(tokens[base + 1], f"{source}:{n}", name)
        if tokens[base + 1] == "BROADCAST":
            broadcasts.append(n)
        if token.group and not keyword.startswith("HYBRID_TRANSFORMER"):
            raise ConfigError(f"{source}:{n}: {name} comm type {tokens[base + 1]} names an "
                              f"expert-parallel group, which only HYBRID_TRANSFORMER "
                              f"workloads have ('ep:' in their header)")
        values[f"{name}_type"], values[f"{name}_group"] = token.collective, token.group
        values[f"{name}_bytes"] = int(_number(tokens[base + 2], source, n,
                                              f"{name} comm size", integer=True))
    delay = _number(tokens[11], source, n, "update delay", integer=False)
    policy = ""
    if keyword == "HYBRID_CUSTOMIZED":
        policy = tokens[12]
        if policy not in LAYER_POLICIES:
            raise ConfigError(f"{source}:{n}: layer parallelism must be one of "
                              f"{', '.join(LAYER_POLICIES)}, found {policy!r}")
    return TextLayer(tokens[0], update_delay=delay, policy=policy, **values)


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
