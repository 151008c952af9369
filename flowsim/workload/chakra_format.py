"""Chakra execution-trace files: ``.et`` files as dicts (decoded by :mod:`.chakra_codec`), the
``<prefix>.<rank>.et`` file layout, and the tables that map Chakra's enums onto flowsim's op
fields (used by :mod:`.chakra` to read traces and :mod:`.chakra_export` to write them)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

from .._io import write_bytes_atomic
from ..errors import ConfigError, describe
from .chakra_codec import delimited, encode_metadata, encode_node, iter_et, metadata_dict, node_dict
from .chakra_schema import COLLECTIVE_COMM_TYPES
from .graph import _some

LOCAL_MEMORY = 1  # tensor_loc value of Chakra's old MemoryType enum
_FLOWSIM_COLLECTIVES = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather",
                        "REDUCE_SCATTER": "reduce_scatter", "ALL_TO_ALL": "all_to_all",
                        "BROADCAST": "broadcast", "REDUCE": "reduce"}
_COMM_TYPE_OF = {flowsim: next(k for k, v in COLLECTIVE_COMM_TYPES.items() if v == chakra)
                 for chakra, flowsim in _FLOWSIM_COLLECTIVES.items()}
#: op fields kept in ``flowsim_*`` attributes when they differ from these defaults
_EXTRAS = (("gap_ns", 0.0), ("update_delay_ns", 0.0), ("priority", "default"), ("layer", -1),
           ("pass_", ""))
_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>0|[1-9][0-9]*)\.et$")


def read_et(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """Decode one ``.et`` file.

    Returns
    -------
    metadata : dict
        ``version`` (str), ``attrs`` and ``attr_types`` (as for nodes).
    nodes : list of dict
        In file order: ``id``, ``name``, ``type`` (``NodeType`` name), ``ctrl_deps``,
        ``data_deps`` (lists of int), ``start_time_micros``, ``duration_micros``, ``inputs`` and
        ``outputs`` (``{"values", "shapes", "types"}`` or None), ``attrs`` (name -> Python
        value; lists for ``*_list``; the first of repeated names, as ASTRA-sim's lookup; an
        attribute without a value is absent) and ``attr_types`` (name -> proto kind such as
        ``"int64_val"``).

    Raises
    ------
    ConfigError
        Unreadable, empty, truncated or corrupt file; the message names the file, the byte
        offset and the node's index in the file.
    """
    messages = iter_et(path)
    _, first = next(messages)
    return metadata_dict(first), [node_dict(node) for _, node in messages]


def write_et(path: str | os.PathLike, nodes: Sequence[Mapping[str, Any]],
             metadata_version: str = "0.0.4", *,
             metadata_attrs: Mapping[str, Any] | None = None) -> None:
    """Write nodes in :func:`read_et`'s format (``type`` may be a name or the enum value).

    Missing keys take proto defaults. Attribute kinds come from ``attr_types`` when given,
    else from the Python value: bool -> ``bool_val``, int -> ``int64_val`` (``uint64_val``
    above 2**63-1), float -> ``double_val``, str -> ``string_val``, bytes -> ``bytes_val``,
    lists likewise ``*_list``. The file is replaced atomically.
    """
    problems = (AttributeError, KeyError, TypeError, ValueError, OverflowError, UnicodeError)
    try:
        out = bytearray(delimited(encode_metadata(metadata_version, metadata_attrs or {})))
    except problems as exc:
        raise ConfigError(f"{path}: GlobalMetadata cannot be encoded: {exc}") from None
    for index, node in enumerate(nodes):
        try:
            out += delimited(encode_node(node))
        except problems as exc:
            raise ConfigError(f"{path}: node #{index} (id {node.get('id', '?')}) cannot be "
                              f"encoded: {exc}") from None
    write_bytes_atomic(path, bytes(out))


def _scan(prefix: Path) -> dict[int, Path]:
    if not prefix.parent.is_dir():
        return {}
    found = {}
    for file in prefix.parent.iterdir():
        match = _RANK_FILE.match(file.name)
        if match and match["stem"] == prefix.name:
            found[int(match["rank"])] = file
    return found


def _rank_files(prefix_or_dir: str | os.PathLike, npus: int | None) -> tuple[Path, list[Path]]:
    given = Path(prefix_or_dir)
    if given.is_file() and (match := _RANK_FILE.match(given.name)):
        given = given.parent / match["stem"]          # one of the files: its workload
    elif given.is_dir():
        stems = sorted({m["stem"] for f in given.iterdir()
                        if (m := _RANK_FILE.match(f.name))})
        if len(stems) != 1:
            found = f"traces of several workloads ({', '.join(stems)}); pass a path prefix" \
                if stems else "no Chakra trace files '<prefix>.<rank>.et'"
            raise ConfigError(f"{given}: {found}")
        given = given / stems[0]
    ranks = _scan(given)
    if not ranks:
        raise ConfigError(f"{given}: no Chakra trace files '{given.name}.<rank>.et' in "
                          f"{given.parent}")
    if npus is not None and (isinstance(npus, bool) or not isinstance(npus, Integral)
                             or npus < 1):
        raise ConfigError(f"argument 'npus': expected a positive integer, found "
                          f"{describe(npus)}")
    count = max(ranks) + 1 if npus is None else int(npus)
    spmd = "; SPMD (--spmd, spmd=True) runs one rank's trace on every NPU" \
        if len(ranks) == 1 and count > 1 else ""
    if len(ranks) == max(ranks) + 1 and len(ranks) != count:
        raise ConfigError(f"{given}: trace files for {len(ranks)} ranks, but the network has "
                          f"{count} NPUs (one trace per NPU{spmd})")
    missing = [r for r in range(count) if r not in ranks]
    if missing:
        raise ConfigError(f"{given}: missing trace file(s) for rank(s) {_some(missing)} "
                          f"(expected {given.name}.0.et .. {given.name}.{count - 1}.et{spmd})")
    if len(ranks) > count:
        raise ConfigError(f"{given}: trace files for {len(ranks)} ranks, but the network has "
                          f"{npus} NPUs (one trace per NPU)")
    return given, [ranks[r] for r in range(count)]


