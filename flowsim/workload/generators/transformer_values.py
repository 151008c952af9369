"""Readers of the transformer spec's structured values (the pipeline layout, the device
preset, the parallelisms' network dims): each validates one key and names it in its error."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from ..._validate import MAX_INT, as_int, check_unknown_keys, choices_of, read_choice, read_list
from ...errors import config_error
from ...topology.network_config import MAX_DIMS

#: The parallelisms, innermost first in Megatron-Core's default rank order ("tp-cp-ep-dp-pp").
Parallelism = Literal["tp", "cp", "ep", "dp", "pp"]
PARALLELISMS: tuple[Parallelism, ...] = choices_of(Parallelism)


def read_layout(values: Mapping[str, Any], source: str) -> tuple[int, ...] | str:
    """``pipeline_layout``: ``even``, ``first_last_fewer`` or layers per (virtual) stage."""
    raw = values.get("pipeline_layout", "even")
    if isinstance(raw, str):
        return read_choice(values, "pipeline_layout", ("even", "first_last_fewer"),
                           source=source, default="even")
    return tuple(read_list(values, "pipeline_layout", partial(as_int, minimum=0,
                                                              maximum=MAX_INT),
                           source=source, max_length=1 << 16,
                           what="'even', 'first_last_fewer' or a list of layers per "
                                "(virtual) pipeline stage"))


def read_device(values: Mapping[str, Any], source: str) -> str | None:
    """``device``: a preset's name, checked now (``None`` when absent)."""
    if values.get("device") is None:
        return None
    from ...topology.clusters import device_name

    # the preset is checked now (a clear error naming the key) and kept by name
    return device_name(values["device"], source=source, key="device")


def read_dims(value: Any, source: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """``dims``: network dims per parallelism, each dim given to one at most."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise config_error(source, "dims", "a mapping of tp, cp, ep, dp, pp to lists of "
                                           "network dims, e.g. {tp: [0], dp: [1, 2], pp: [3]}",
                           value)
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
