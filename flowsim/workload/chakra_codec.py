"""Chakra ``.et`` files through the ``protobuf`` package: the length-delimited stream, and the
messages of :mod:`.chakra_schema` as the plain dicts :mod:`.chakra` works with.

An ``.et`` file is a sequence of messages, each preceded by its byte length as a base-128
varint: one ``GlobalMetadata``, then one ``Node`` per op. The stream is read message by message
(a trace is never held in memory as a whole), and every read is bounded: a length prefix that
runs past the end of the file is an error naming the file and the byte offset, never an
allocation. protobuf decodes each message; what it reports as corrupt becomes one line naming
the file, the offset and the message's index.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterator, Mapping
from numbers import Integral, Real
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from ..errors import ConfigError, describe
from .chakra_schema import (
    FIELD_NAMES,
    INT_RANGES,
    NODE_TYPES,
    SCALARS,
    AttributeProto,
    GlobalMetadata,
    Node,
)

#: A varint of a 64-bit length has at most 10 bytes.
_MAX_VARINT_BYTES = 10
#: ``AttributeProto.WhichOneof``, looked up once (the hot loop of decoding).
_which = AttributeProto.WhichOneof
#: The list kinds of the attribute oneof.
_LIST_KINDS = frozenset(f"{s}_list" for s in SCALARS)
#: Bytes read from the file at a time (the stream is never held whole).
_BLOCK = 1 << 20


# ------------------------------------------------------------------------------- reading

class _Corrupt(ValueError):
    """A problem of the byte stream at ``offset``."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def _messages(stream: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, payload)`` of each length-prefixed message of a stream of ``size`` bytes,
    read in blocks of :data:`_BLOCK` bytes (a larger message in one read of its size)."""
    buf, base, pos = b"", 0, 0           # buf holds the file from offset `base` on
    while True:
        if len(buf) - pos < _MAX_VARINT_BYTES:
            buf, base, pos = buf[pos:] + stream.read(_BLOCK), base + pos, 0
            if not buf:
                return
        at = base + pos
        length = shift = 0
        for count in range(_MAX_VARINT_BYTES + 1):
            if count == _MAX_VARINT_BYTES:
                raise _Corrupt("length prefix longer than 10 bytes", at)
            if pos >= len(buf):
                raise _Corrupt("the length prefix runs past the end of the file", at)
            byte = buf[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        if length > size - (base + pos):
            raise _Corrupt(f"message declares {length} bytes, only {size - base - pos} "
                           f"remain in the file", at)
        if pos + length > len(buf):      # the message runs past this block
            buf, base, pos = buf[pos:] + stream.read(max(_BLOCK, length)), base + pos, 0
        payload = buf[pos:pos + length]
        if len(payload) != length:       # the file shrank while being read
            raise _Corrupt(f"message declares {length} bytes, the file ends first", at)
        yield at, payload
        pos += length


def _check_known_fields(message: Any, kind: Any, at: int) -> None:
    """protobuf keeps a known field sent with another wire type as an unknown field; that is
    a corrupt file, not a newer schema (whose new field numbers are skipped)."""
    names = FIELD_NAMES[kind]
    for field in unknown_fields.UnknownFieldSet(message):  # type: ignore[attr-defined]  # iterable; the stubs omit it
        if field.field_number in names:
            name = names[field.field_number]
            raise _Corrupt(f"{kind.DESCRIPTOR.name}.{name} (field {field.field_number}) has "
                           f"wire type {field.wire_type}", at)


def iter_et(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """The messages of an ``.et`` file as they are read: ``(offset, GlobalMetadata)`` first,
    then ``(offset, Node)`` for each node (protobuf messages).

    Raises
    ------
    ConfigError
        The file cannot be read, is empty, or is truncated or corrupt (the message names the
        file, the byte offset and ``GlobalMetadata`` or the node's index in the file).
    """
    file = Path(path)
    index = -1
    try:
        with open(file, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            for at, payload in _messages(stream, size):
                kind = GlobalMetadata if index < 0 else Node
                message = kind()
                try:
                    message.ParseFromString(payload)
                except DecodeError as exc:
                    raise _Corrupt(f"not a valid {kind.DESCRIPTOR.name} message ({exc})",
                                   at) from None
                _check_known_fields(message, kind, at)
                if kind is Node and message.type >= len(NODE_TYPES):
                    raise _Corrupt(f"unknown node type {message.type} (known: 0..7, "
                                   f"{', '.join(NODE_TYPES)})", at)
                yield at, message
                index += 1
    except FileNotFoundError:
        raise ConfigError(f"{file}: Chakra trace not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{file}: is a folder, expected a Chakra trace file") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read Chakra trace: {exc}") from None
    except _Corrupt as exc:
        where = "GlobalMetadata" if index < 0 else f"node #{index}"
        raise ConfigError(f"{file}: corrupt Chakra trace at byte {exc.offset} ({where}): "
                          f"{exc}") from None
    if index < 0:
        raise ConfigError(f"{file}: empty file, expected a Chakra trace (GlobalMetadata, then "
                          f"nodes)")


def attributes(attrs: Any, wanted: Container[str] | None = None
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """Values and kinds (``"int64_val"``, ...) of repeated ``AttributeProto`` by name (those
    named in ``wanted``; default all).

    The first of repeated names wins, as ASTRA-sim's lookup; an attribute whose ``value`` is
    unset (symbolic_tensor_graph writes such ``inputs`` / ``outputs``) is absent.
    """
    values: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for attr in attrs:
        name = attr.name
        if name in values or (wanted is not None and name not in wanted):
            continue
        kind = _which(attr, "value")
        if kind is None:
            continue
        value = getattr(attr, kind)
        values[name] = list(value.values) if kind in _LIST_KINDS else value
        kinds[name] = kind
    return values, kinds


def metadata_dict(message: Any) -> dict:
    """A ``GlobalMetadata`` as ``{"version", "attrs", "attr_types"}``."""
    attrs, kinds = attributes(message.attr)
    return {"version": message.version, "attrs": attrs, "attr_types": kinds}


def _io(message: Any, field: str) -> dict | None:
    if not message.HasField(field):
        return None
    io = getattr(message, field)
    return {"values": io.values, "shapes": io.shapes, "types": io.types}


def node_dict(message: Any, wanted: Container[str] | None = None) -> dict:
    """A ``Node`` as the dict of :func:`~.chakra_format.read_et`; with ``wanted``, only the
    attributes it names, and no ``inputs`` / ``outputs`` (what a reader that maps nodes onto
    ops needs: less to convert)."""
    attrs, kinds = attributes(message.attr, wanted)
    full = wanted is None
    # [*x] copies protobuf's repeated scalars faster than list(x)
    return {"id": message.id, "name": message.name, "type": NODE_TYPES[message.type],
            "ctrl_deps": [*message.ctrl_deps], "data_deps": [*message.data_deps],
            "start_time_micros": message.start_time_micros,
            "duration_micros": message.duration_micros,
            "inputs": _io(message, "inputs") if full else None,
            "outputs": _io(message, "outputs") if full else None,
            "attrs": attrs, "attr_types": kinds}


# ------------------------------------------------------------------------------- writing

def delimited(payload: bytes) -> bytes:
    """One message of a length-prefixed stream (the varint length, then the payload)."""
    length, out = len(payload), bytearray()
    while length > 0x7F:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    return bytes(out) + payload


def infer_kind(value: Any) -> str:
    """The attribute kind of a Python value: bool -> ``bool_val``, int -> ``int64_val``
    (``uint64_val`` at 2**63 and above), float -> ``double_val``, str, bytes, and lists of
    them as ``*_list``."""
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (bool, np.bool_)) for v in value):
            return "bool_list" if value else "int64_list"
        if all(isinstance(v, Integral) and not isinstance(v, bool) for v in value):
            return "uint64_list" if any(v >= 1 << 63 for v in value) else "int64_list"
        for kind, types in (("double_list", Real), ("string_list", str),
                            ("bytes_list", (bytes, bytearray))):
            if all(isinstance(v, types) for v in value):
                return kind
        raise TypeError(f"list mixes value types: {describe(value)}")
    if isinstance(value, (bool, np.bool_)):
        return "bool_val"
    if isinstance(value, Integral):
        return "int64_val" if -(1 << 63) <= int(value) < (1 << 63) else "uint64_val"
    if isinstance(value, Real):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, (bytes, bytearray)):
        return "bytes_val"
    raise TypeError(f"attribute value {describe(value)} has no Chakra type")


def _scalar(name: str, scalar: str, value: Any) -> Any:
    """A value converted for protobuf, integer ranges checked with a message naming the
    attribute."""
    if scalar in INT_RANGES:
        low, high = INT_RANGES[scalar]
        value = int(value)
        if not low <= value < high:
            raise ValueError(f"attribute '{name}': {value} does not fit {scalar}")
        return value
    if scalar == "bool":
        return bool(value)
    if scalar in ("double", "float"):
        return float(value)
    if scalar == "bytes":
        return bytes(value)
    return value


def _set_attrs(target: Any, attrs: Mapping[str, Any], kinds: Mapping[str, str]) -> None:
    for name, value in attrs.items():
        kind = kinds.get(name) or infer_kind(value)
        scalar, _, form = kind.rpartition("_")
        if scalar not in SCALARS or form not in ("val", "list"):
            raise ValueError(f"unknown attribute kind {kind!r}")
        attr = target.add(name=name)
        if form == "val":
            setattr(attr, kind, _scalar(name, scalar, value))
        else:
            holder = getattr(attr, kind)
            holder.SetInParent()          # an empty list is still this kind
            holder.values.extend(_scalar(name, scalar, v) for v in value)


def encode_metadata(version: str, attrs: Mapping[str, Any]) -> bytes:
    """A ``GlobalMetadata`` message (attribute kinds inferred from the values)."""
    message = GlobalMetadata(version=version)
    _set_attrs(message.attr, attrs, {})
    return message.SerializeToString()


def encode_node(node: Mapping[str, Any]) -> bytes:
    """A ``Node`` message from :func:`node_dict`'s form (missing keys: proto defaults; ``type``
    a name or the enum value; kinds from ``attr_types``, else inferred)."""
    kind = node.get("type", 0)
    type_value = NODE_TYPES.index(kind) if isinstance(kind, str) else int(kind)
    if not 0 <= type_value < len(NODE_TYPES):
        raise ValueError(f"unknown node type {kind!r}")
    message = Node(id=int(node.get("id", 0)), name=node.get("name") or "", type=type_value,
                   ctrl_deps=[int(d) for d in node.get("ctrl_deps", ())],
                   data_deps=[int(d) for d in node.get("data_deps", ())],
                   start_time_micros=int(node.get("start_time_micros", 0)),
                   duration_micros=int(node.get("duration_micros", 0)))
    for field in ("inputs", "outputs"):
        io = node.get(field)
        if io is not None:
            target = getattr(message, field)
            target.SetInParent()
            for sub in ("values", "shapes", "types"):
                setattr(target, sub, io.get(sub, ""))
    _set_attrs(message.attr, node.get("attrs") or {}, node.get("attr_types") or {})
    return message.SerializeToString()
