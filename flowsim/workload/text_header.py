"""The first line of a text workload and its communication tokens, in the dialects of
ASTRA-sim 1.0 and of SimAI / aicb.

Line 1 is the parallelism keyword, then its parameters. ASTRA-sim 1.0 reads
``HYBRID_TRANSFORMER`` parameters in a fixed order (``model_parallel_NPU_group: N
checkpoints: n l1 .. ln checkpoint_initiates: m k1 .. km``); SimAI searches the line for each
key, in any order, and adds its own (``Workload.cc`` of aliyun/SimAI)::

    ep: E          expert-parallel group: E consecutive tensor-parallel groups
    pp: P          pipeline stages; SimAI simulates none (its groups fold them into data
                   parallelism) and uses P, with vpp:, ga: and pp_comm, only in its
                   end-of-run report
    vpp: V, ga: G  virtual stages and gradient accumulation (aicb already unrolls the G
                   micro-batches into the layer lines)
    all_gpus: A    GPUs of the job (SimAI simulates the network's GPU count)
    pp_comm S      bytes of a pipeline activation (with or without the colon)

Both forms are read here, keys in any order (the colon optional); a key neither knows is an
error naming it. Missing SimAI keys take the values that change nothing: 1 (``all_gpus``: the
network's NPUs, ``pp_comm``: 0).

Communication tokens (SimAI's parser, prefix first): ``ALLREDUCE``, ``ALLGATHER``,
``REDUCESCATTER``, ``ALLTOALL``, each bare (the tensor-parallel group for forward and
input-gradient columns, the data-parallel group for weight gradients), ``_EP`` (the
expert-parallel group) or ``_DP_EP`` (data parallel among expert groups); ``NONE``;
``BROADCAST``, which ASTRA-sim 1.0 and SimAI both read as no communication (flowsim does the
same and says so). Any other token is an error: ASTRA-sim would silently read it as
``NONE``, SimAI as a collective of no group, and it is almost always a typo.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..topology.network_config import MAX_NPUS

#: Collective of each communication token's prefix.
COLLECTIVE_TOKENS = {"ALLREDUCE": "all_reduce", "ALLTOALL": "all_to_all",
                     "ALLGATHER": "all_gather", "REDUCESCATTER": "reduce_scatter"}
#: Suffixes naming the group of a collective: "" the column's own (TP or DP), EP, DP_EP.
GROUP_SUFFIXES = {"": "", "_EP": "EP", "_DP_EP": "DP_EP"}
#: Tokens that mean no communication.
NO_COMMUNICATION = ("NONE", "BROADCAST")
#: HYBRID_TRANSFORMER header keys with one integer value (ASTRA-sim 1.0's and SimAI's).
VALUE_KEYS = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
#: Keys followed by a count and that many layer indices.
LIST_KEYS = ("checkpoints", "checkpoint_initiates")


@dataclass(frozen=True)
class CommToken:
    """A parsed communication token: ``collective`` (None: no communication) and ``group``
    ("", "EP" or "DP_EP")."""

    collective: str | None
    group: str = ""


def comm_token(token: str, where: str, column: str) -> CommToken:
    """Read a communication token (see the module docstring)."""
    if token in NO_COMMUNICATION:
        return CommToken(None)
    if token.startswith("ALLREDUCEALLTOALL"):
        raise ConfigError(f"{where}: ALLREDUCEALLTOALL is parsed by ASTRA-sim but never run "
                          "(it panics); use ALLREDUCE or ALLTOALL")
    for prefix, collective in COLLECTIVE_TOKENS.items():
        suffix = token[len(prefix):] if token.startswith(prefix) else None
        if suffix in GROUP_SUFFIXES:
            return CommToken(collective, GROUP_SUFFIXES[suffix])
    known = [p + s for p in COLLECTIVE_TOKENS for s in GROUP_SUFFIXES]
    raise ConfigError(f"{where}: {column} comm type must be one of {', '.join(known)}, NONE "
                      f"or BROADCAST, found {token!r}")


def transformer_header(keyword: str, rest: list[str], source: str, number) -> dict:
    """The parameters of a ``HYBRID_TRANSFORMER*`` line (``number`` reads an integer
    token: ``number(token, key)``)."""
    out: dict = {}
    i = 0
    while i < len(rest):
        key = rest[i].rstrip(":")
        if key in out:
            raise ConfigError(f"{source}:1: header key '{key}' appears twice")
        if key not in VALUE_KEYS and key not in LIST_KEYS:
            raise ConfigError(f"{source}:1: unknown {keyword} header key {rest[i]!r} (expected "
                              f"{', '.join(k + ':' for k in VALUE_KEYS + LIST_KEYS)})")
        if i + 1 >= len(rest):
            raise ConfigError(f"{source}:1: header key '{key}' needs a value")
        value = number(rest[i + 1], key)
        if key in VALUE_KEYS:
            out[key] = value
            i += 2
            continue
        values = rest[i + 2: i + 2 + value]
        if len(values) != value:
            raise ConfigError(f"{source}:1: '{key}:' announces {value} layers but lists "
                              f"{len(values)}")
        out[key] = tuple(number(v, key) for v in values)
        i += 2 + value
    if "model_parallel_NPU_group" not in out:
        raise ConfigError(f"{source}:1: {keyword} needs 'model_parallel_NPU_group: N'")
    if keyword.endswith("FWD_IN_BCKWD"):
        for key in LIST_KEYS:
            if key not in out:
                raise ConfigError(f"{source}:1: {keyword} needs '{key}: n l1 .. ln'")
    # SimAI only warns about 0 for its report keys; the two that shape groups must be >= 1
    for key in ("model_parallel_NPU_group", "ep"):
        if key in out and not 1 <= out[key] <= MAX_NPUS:
            raise ConfigError(f"{source}:1: {key} must be in 1..{MAX_NPUS}, found {out[key]}")
    return out
