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
  (last) virtual stage holds one layer fewer.

Megatron-LM's own divisibility rules are checked, each error naming the flag; flowsim places
the embedding on the first virtual stage, the loss and the multi-token prediction layers on
the last, and refuses a layout string that puts them elsewhere.
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
#: the flags this module reads
FLAGS = (LAYOUT, FIRST, LAST, EMBEDDING, LOSS)


def layout_keys(flags: Mapping[str, str | None], keys: Mapping[str, Any], where: str
                ) -> dict[str, Any]:
    """The ``pipeline_layout`` (and, from a layout string, ``vpp``) Megatron-LM's pipeline
    split flags give, for the ``layers``, ``pp``, ``vpp`` and ``mtp_layers`` in ``keys``;
    empty when none is given."""
    layers, pp, vpp = keys.get("layers", 0), keys.get("pp", 1), keys.get("vpp", 1)
    if not all(isinstance(v, int) and v >= 1 for v in (layers, pp, vpp)):
        return {}   # the transformer names a bad or missing count
    if flags.get(LAYOUT) is not None:
        return _from_string(str(flags[LAYOUT]), layers, pp, keys, where)
    uneven = [flag for flag in (FIRST, LAST) if flags.get(flag) is not None]
    accounted = [flag for flag in (EMBEDDING, LOSS) if flag in flags]
    if uneven and accounted:
        raise config_error(where, f"--{accounted[0]}", f"not with --{uneven[0]} (Megatron-LM "
                           "supports no embedding or loss stage with uneven pipelining)",
                           "given")
    if uneven:
        return {"pipeline_layout": _uneven(flags, layers, pp, vpp, where)}
    if accounted:
        return {"pipeline_layout": _accounted(accounted, layers, pp, vpp, where)}
    return {}


def _uneven(flags: Mapping[str, str | None], layers: int, pp: int, vpp: int, where: str
            ) -> list[int]:
    given: dict[int, int] = {}
    for flag, rank in ((FIRST, 0), (LAST, pp - 1)):
        value = flags.get(flag)
        if value is not None:
            if not re.fullmatch(r"\d{1,9}", value.strip()):
                raise config_error(where, f"--{flag}", "a count of layers", value)
            given[rank] = int(value)
    named = f"--{FIRST if 0 in given else LAST}"
    others = pp - len(given)
    rest = layers - sum(given.values())
    if rest < 0 or (others and rest % others) or (not others and rest):
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
    def repeat(match: re.Match[str]) -> str:   # refused before it is built when too long
        if len(match.group(1)) * int(match.group(2)) > MAX_LAYOUT:
            raise config_error(where, flag, f"a layout of at most {MAX_LAYOUT} layers", text)
        return match.group(1) * int(match.group(2))

    unrolled = text.replace(",", "")
    for pattern in (r"\(([^()]+)\)\*(\d{1,6})", r"(.)\*(\d{1,6})"):   # Megatron's order
        unrolled = re.sub(pattern, repeat, unrolled)
        if len(unrolled) > MAX_LAYOUT:
            raise config_error(where, flag, f"a layout of at most {MAX_LAYOUT} layers", text)
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
              ("m" not in "".join(stages[:-1]),
               "the multi-token prediction layers (m) in the last stage, beside the loss "
               "(where flowsim places them)"))
    for ok, expected in checks:
        if not ok:
            raise config_error(where, flag, expected, text)
    vpp = len(stages) // pp
    if keys.get("vpp", 1) not in (1, vpp):
        raise config_error(where, flag, f"{keys['vpp']} virtual stages per rank, as given "
                           "beside it", f"{vpp} (its {len(stages)} stages over {pp} ranks)")
    return {"pipeline_layout": [stage.count("t") for stage in stages], "vpp": vpp}
