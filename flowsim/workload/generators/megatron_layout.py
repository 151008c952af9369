"""Megatron-LM's ways of splitting the layers over the pipeline's virtual stages, read as a
``pipeline_layout`` list (decoder layers per virtual stage, in model order):

* ``--pipeline-model-parallel-layout``: every virtual stage spelled out, Megatron-Core's
  ``PipelineParallelLayerLayout`` string (``E`` the embedding, ``t`` a decoder layer, ``m`` a
  multi-token prediction layer, ``L`` the loss; stages split by ``|``, ``(...)*n`` and
  ``x*n`` repeat, commas are cosmetic): ``"Etttt|(tttt|)*14tmL"``. Its stage count sets the
  virtual stages per rank;
* ``--decoder-first-pipeline-num-layers`` and ``--decoder-last-pipeline-num-layers``: the
  first and the last pipeline rank hold that many layers, the ranks between an equal share of
  the rest, and each rank's chunks an equal share of its layers
  (``transformer_block.get_num_layers_to_build``);
* ``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split``:
  the embedding and the loss each take a layer's place in an even split, so the first
  (last) virtual stage holds one layer fewer;
* ``--num-layers-per-virtual-pipeline-stage``: the virtual stages per rank, from the layers
  per rank (the embedding and the loss counted with the flags above).

Megatron-LM's own rules are checked (which flags go together, the counts that must divide
or be positive), each error naming the flag; flowsim places the embedding on the first
virtual stage, the loss and the multi-token prediction layers on the last, and refuses a
layout string that puts them elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...errors import config_error

#: the layout string's layer characters
LAYER_CHARACTERS = "EtmL"
#: longest layout string unrolled (characters)
MAX_LAYOUT = 1 << 20
FIRST, LAST = "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers"
EMBEDDING, LOSS = "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split"
LAYOUT = "pipeline-model-parallel-layout"
PER_STAGE, STAGES = ("num-layers-per-virtual-pipeline-stage",
                     "num-virtual-stages-per-pipeline-rank")
#: the flags this module reads (``--num-virtual-stages-per-pipeline-rank`` is a number the
#: importer reads as ``vpp``)
FLAGS = (LAYOUT, FIRST, LAST, EMBEDDING, LOSS, PER_STAGE)


def layout_keys(flags: Mapping[str, str | None], keys: Mapping[str, Any], where: str
                ) -> dict[str, Any]:
    """The ``pipeline_layout`` and ``vpp`` Megatron-LM's pipeline split flags give, for the
    ``layers``, ``pp``, ``vpp`` and ``mtp_layers`` in ``keys``; empty when none is given."""
    layers, pp, vpp = keys.get("layers", 0), keys.get("pp", 1), keys.get("vpp", 1)
    if not all(isinstance(v, int) and v >= 1 for v in (layers, pp, vpp)):
        return {}   # the transformer names a bad or missing count
    for flag in (LAYOUT, FIRST, LAST, PER_STAGE):   # Megatron-LM's parser wants their values
        if flag in flags and flags[flag] is None:
            raise config_error(where, f"--{flag}", "a value after it", None)
    uneven = [flag for flag in (FIRST, LAST) if flags.get(flag) is not None]
    accounted = [flag for flag in (EMBEDDING, LOSS) if flag in flags]
    virtual = [flag for flag in (PER_STAGE, STAGES, LAYOUT) if flags.get(flag) is not None]
    _refuse_together(where, virtual[1:], virtual[:1], "one of them sets the virtual stages")
    if flags.get(LAYOUT) is not None:
        _refuse_together(where, uneven + accounted, [LAYOUT], "the layout places every layer")
        return _from_string(str(flags[LAYOUT]), layers, pp, keys, where)
    _refuse_together(where, accounted, uneven, "Megatron-LM supports no embedding or loss "
                     "stage with uneven pipelining")
    out: dict[str, Any] = {}
    if flags.get(PER_STAGE) is not None:
        _refuse_together(where, uneven, [PER_STAGE], f"give --{STAGES} with uneven "
                         "pipelining, as Megatron-LM asks")
        out["vpp"] = vpp = _per_stage(str(flags[PER_STAGE]), layers + len(accounted), pp,
                                      where)
    if uneven:
        out["pipeline_layout"] = _uneven(flags, layers, pp, vpp, where)
    elif accounted:
        out["pipeline_layout"] = _accounted(accounted, layers, pp, vpp, where)
    return out


def _refuse_together(where: str, flags: list[str], given: list[str], why: str) -> None:
    """One error when any of ``flags`` comes with one of ``given``."""
    if flags and given:
        raise config_error(where, f"--{flags[0]}", f"not with --{given[0]} ({why})", "given")


def _per_stage(value: str, slots: int, pp: int, where: str) -> int:
    """Virtual stages per rank from the layers per virtual stage (``slots``: the layers,
    and the embedding and the loss where they count as layers)."""
    if not re.fullmatch(r"\s*\d{1,9}\s*", value) or not int(value) or slots % pp or \
            (slots // pp) % int(value):
        raise config_error(where, f"--{PER_STAGE}", f"a divisor of the layers per pipeline "
                           f"rank ({slots} over {pp})", value)
    return slots // pp // int(value)


def _uneven(flags: Mapping[str, str | None], layers: int, pp: int, vpp: int, where: str
            ) -> list[int]:
    given: dict[int, int] = {}
    for flag, rank in ((FIRST, 0), (LAST, pp - 1)):
        value = flags.get(flag)
        if value is not None:
            if not re.fullmatch(r"\d{1,9}", value.strip()) or not int(value):
                raise config_error(where, f"--{flag}", "a positive count of layers", value)
            given[rank] = int(value)
    named = f"--{FIRST if 0 in given else LAST}"
    others = pp - len(given)
    rest = layers - sum(given.values())
    if rest < 0 or bool(rest) != bool(others) or (others and rest % others):
        raise config_error(where, named, f"counts that leave the other {others} pipeline "
                           f"ranks an equal share of --num-layers {layers}", given[min(given)])
    per_rank = [given.get(rank, rest // others if others else 0) for rank in range(pp)]
    if any(n % vpp for n in per_rank):
        raise config_error(where, named, f"layers per rank a multiple of the virtual stages "
                           f"per rank ({vpp})", per_rank)
    return [per_rank[rank] // vpp for _ in range(vpp) for rank in range(pp)]


def _accounted(accounted: list[str], layers: int, pp: int, vpp: int, where: str) -> list[int]:
    slots = layers + len(accounted)
    if slots % (pp * vpp):
        raise config_error(where, f"--{accounted[0]}", f"--num-layers {layers} + {len(accounted)} "
                           f"a multiple of pipeline x virtual stages ({pp * vpp})", layers)
    counts = [slots // (pp * vpp)] * (pp * vpp)
    counts[0] -= EMBEDDING in accounted
    counts[-1] -= LOSS in accounted
    return counts


def _from_string(text: str, layers: int, pp: int, keys: Mapping[str, Any], where: str
                 ) -> dict[str, Any]:
    flag = f"--{LAYOUT}"
    unrolled = text.replace(",", "")
    built = [0]   # the length a substitution builds, a running total checked before it grows

    def repeat(match: re.Match[str]) -> str:
        built[0] += len(match.group(1)) * (int(match.group(2)) - 1)
        if built[0] > MAX_LAYOUT:
            raise config_error(where, flag, f"a layout of at most {MAX_LAYOUT} layers", text)
        return match.group(1) * int(match.group(2))

    for pattern in (r"\(([^()]+)\)\*(\d{1,6})", r"(.)\*(\d{1,6})"):   # Megatron's order
        built[0] = len(unrolled)
        unrolled = re.sub(pattern, repeat, unrolled)
    stages = unrolled.split("|")
    bad = set(unrolled) - set(LAYER_CHARACTERS + "|")
    if bad:
        raise config_error(where, flag, "stages of E (embedding), t (decoder layer), m "
                           "(multi-token prediction) and L (loss) split by |", text)
    if len(stages) % pp:
        raise config_error(where, flag, f"a multiple of the pipeline size ({pp}) of stages",
                           len(stages))
    mtp = keys.get("mtp_layers", 0) or 0
    whole = "".join(stages)
    checks = ((whole.count("E") == 1 and whole.startswith("E"), "the embedding (E) once, first"),
              (whole.count("L") == 1 and whole.endswith("L"), "the loss (L) once, last"),
              (whole.count("t") == layers, f"--num-layers {layers} decoder layers (t)"),
              (whole.count("m") == mtp, f"--mtp-num-layers {mtp} layers m"),
              ("m" not in whole or "t" not in whole[whole.index("m"):],
               "the decoder layers (t) before the multi-token prediction layers (m)"),
              ("m" not in "".join(stages[:-1]),
               "the multi-token prediction layers (m) in the last stage, beside the loss "
               "(where flowsim places them)"))
    for ok, expected in checks:
        if not ok:
            raise config_error(where, flag, expected, text)
    return {"pipeline_layout": [stage.count("t") for stage in stages],
            "vpp": len(stages) // pp}
