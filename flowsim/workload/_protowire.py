"""Chakra's ``.et`` messages in the protobuf wire format, read and written without protoc.

A message is a sequence of fields, each a *tag* (``field_number << 3 | wire_type`` as a varint)
followed by its value: a varint (wire type 0), 8 little-endian bytes (1), a length-prefixed
byte string (2: strings, bytes, sub-messages and packed repeated scalars) or 4 little-endian
bytes (5). Varints are base-128, least significant group first, high bit = "more follows", at
most 10 bytes for 64 bits. Negative ``int32``/``int64`` are sent as their 64-bit two's
complement; ``sint32``/``sint64`` are zigzag-encoded first.

Decoding functions take the whole buffer and absolute positions, so every error can name the
byte offset in the file; they raise :class:`WireError`, which callers turn into the project's
``ConfigError`` with the file name.

The second half encodes and decodes the messages of Chakra's ``et_def.proto`` (``GlobalMetadata``,
``Node``, ``AttributeProto``) as plain dicts; :mod:`.chakra` documents that format.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..errors import describe

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_U64 = 1 << 64
_MAX_FIELD = (1 << 29) - 1


class WireError(ValueError):
    """Malformed protobuf bytes; ``offset`` is where in the buffer the problem starts."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


# ---------------------------------------------------------------------------------- decoding

def decode_varint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """The unsigned varint at ``buf[pos]`` and the position after it."""
    stop = len(buf) if end is None else end
    result = shift = 0
    start = pos
    while True:
        if pos >= stop:
            raise WireError("varint runs past the end of its message", start)
        if pos - start >= _MAX_VARINT_BYTES:
            raise WireError("varint longer than 10 bytes", start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= _U64:
                raise WireError("varint larger than 64 bits", start)
            return result, pos
        shift += 7


def iter_fields(buf: bytes | memoryview, pos: int, end: int
                ) -> Iterator[tuple[int, int, Any, int]]:  # value: int, or a (start, stop) span
    """Yield ``(field_number, wire_type, value, offset)`` for each field of ``buf[pos:end]``.

    ``value`` is an unsigned int for wire types 0, 1 and 5 (the raw bits of fixed fields) and
    the ``(start, stop)`` span of the payload for wire type 2. ``offset`` is the tag's position.
    Groups (wire types 3 and 4, deprecated) are rejected.
    """
    while pos < end:
        at = pos
        tag, pos = decode_varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise WireError("field number 0", at)
        if wire == VARINT:
            value, pos = decode_varint(buf, pos, end)
            yield field, wire, value, at
        elif wire == I64 or wire == I32:
            width = 8 if wire == I64 else 4
            if pos + width > end:
                raise WireError(f"fixed{width * 8} field {field} runs past the end of its "
                                f"message", at)
            value = int.from_bytes(bytes(buf[pos:pos + width]), "little")
            pos += width
            yield field, wire, value, at
        elif wire == LEN:
            length, pos = decode_varint(buf, pos, end)
            if pos + length > end:
                raise WireError(f"field {field} declares {length} bytes, only {end - pos} "
                                f"remain in its message", at)
            yield field, wire, (pos, pos + length), at
            pos += length
        else:
            raise WireError(f"field {field} has unsupported wire type {wire}", at)


def iter_delimited(buf: bytes | memoryview) -> Iterator[tuple[int, int, int]]:
    """Yield ``(offset, start, stop)`` of each varint-length-prefixed message of a stream."""
    pos, end = 0, len(buf)
    while pos < end:
        at = pos
        length, pos = decode_varint(buf, pos, end)
        if pos + length > end:
            raise WireError(f"message declares {length} bytes, only {end - pos} remain in "
                            f"the file", at)
        yield at, pos, pos + length
        pos += length


def iter_packed(buf: bytes | memoryview, start: int, stop: int, wire: int) -> Iterator[int]:
    """The scalars of a packed repeated field (``wire``: the element's own wire type)."""
    if wire == VARINT:
        pos = start
        while pos < stop:
            value, pos = decode_varint(buf, pos, stop)
            yield value
        return
    width = 8 if wire == I64 else 4
    if (stop - start) % width:
        raise WireError(f"packed fixed{width * 8} payload of {stop - start} bytes is not a "
                        f"multiple of {width}", start)
    for pos in range(start, stop, width):
        yield int.from_bytes(bytes(buf[pos:pos + width]), "little")


def as_signed(value: int, bits: int) -> int:
    """Two's complement reading of the low ``bits`` bits (``int32``/``int64``/``sfixed``)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def bits_to_double(value: int) -> float:
    return struct.unpack("<d", value.to_bytes(8, "little"))[0]


def bits_to_float(value: int) -> float:
    return struct.unpack("<f", value.to_bytes(4, "little"))[0]


# ---------------------------------------------------------------------------------- encoding

def encode_varint(value: int) -> bytes:
    """Varint of an integer in ``-2**63 .. 2**64-1`` (negatives as 64-bit two's complement)."""
    if value < 0:
        if value < -(1 << 63):
            raise ValueError(f"{value} does not fit in 64 bits")
        value += _U64
    elif value >= _U64:
        raise ValueError(f"{value} does not fit in 64 bits")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63) if value < 0 else value << 1


def tag(field: int, wire: int) -> bytes:
    if not 1 <= field <= _MAX_FIELD:
        raise ValueError(f"field number {field} out of range")
    return encode_varint(field << 3 | wire)


def varint_field(field: int, value: int) -> bytes:
    return tag(field, VARINT) + encode_varint(value)


def len_field(field: int, payload: bytes) -> bytes:
    return tag(field, LEN) + encode_varint(len(payload)) + payload


def fixed_field(field: int, payload: bytes) -> bytes:
    """An 8- or 4-byte field given its little-endian payload."""
    return tag(field, I64 if len(payload) == 8 else I32) + payload


def delimited(payload: bytes) -> bytes:
    """One message of a length-prefixed stream."""
    return encode_varint(len(payload)) + payload


# ------------------------------------------------------------- Chakra's et_def.proto messages

# --- Schema facts, from schema/protobuf/et_def.proto of astra-sim/chakra at commit
# b8d2e8b988b3110e2e83fb5cd3f1587944b07b15 (the same numbers in mlcommons/chakra 6dc63e147b9d,
# which adds node types 8-10 that ASTRA-sim does not know).
#: enum NodeType (value = index)
NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE",
              "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE")
#: enum CollectiveCommType
COLLECTIVE_COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER",
                         5: "BROADCAST", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER",
                         8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER", 99: "INVALID_COMM_TYPE"}
# message Node: id 1, name 2, type 3, ctrl_deps 4, data_deps 5 (repeated uint64),
# start_time_micros 6, duration_micros 7, inputs 8, outputs 9 (IOInfo), attr 10 (AttributeProto)
(_ID, _NAME, _TYPE, _CTRL_DEPS, _DATA_DEPS, _START, _DURATION, _INPUTS, _OUTPUTS,
 _ATTR) = range(1, 11)
_META_VERSION, _META_ATTR = 1, 2          # message GlobalMetadata: version 1, attr 2
_ATTR_NAME = 1                            # message AttributeProto: name 1, doc_string 2, then
_SCALARS = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
            "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
# ... the oneof `value`: <s>_val = 3 + 2i, <s>_list = 4 + 2i for _SCALARS[i]; a <S>List
# message holds `repeated <s> values = 1`.
_IOINFO = ("values", "shapes", "types")   # message IOInfo: values 1, shapes 2, types 3


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


# kind -> (wire type, decode from raw int / bytes, encode to raw int / bytes)
_CODECS: dict[str, tuple[int, Any, Any]] = {
    "double": (I64, bits_to_double, lambda v: struct.pack("<d", v)),
    "float": (I32, bits_to_float, lambda v: struct.pack("<f", v)),
    "int32": (VARINT, lambda v: as_signed(v, 32), int),
    "int64": (VARINT, lambda v: as_signed(v, 64), int),
    "uint32": (VARINT, lambda v: v & 0xFFFFFFFF, int),
    "uint64": (VARINT, int, int),
    "sint32": (VARINT, lambda v: zigzag_decode(v & 0xFFFFFFFF), zigzag_encode),
    "sint64": (VARINT, zigzag_decode, zigzag_encode),
    "fixed32": (I32, int, lambda v: struct.pack("<I", v)),
    "fixed64": (I64, int, lambda v: struct.pack("<Q", v)),
    "sfixed32": (I32, lambda v: as_signed(v, 32), lambda v: struct.pack("<i", v)),
    "sfixed64": (I64, lambda v: as_signed(v, 64), lambda v: struct.pack("<q", v)),
    "bool": (VARINT, bool, int),
    "string": (LEN, _utf8, lambda v: v.encode("utf-8")),
    "bytes": (LEN, bytes, bytes),
}
_INT_RANGES = {"int32": (-(1 << 31), 1 << 31), "int64": (-(1 << 63), 1 << 63),
               "uint32": (0, 1 << 32), "uint64": (0, 1 << 64), "sint32": (-(1 << 31), 1 << 31),
               "sint64": (-(1 << 63), 1 << 63)}


def _expect(wire: int, expected: int, field: int, at: int, what: str) -> None:
    if wire != expected:
        raise WireError(f"{what} (field {field}) has wire type {wire}, expected {expected}", at)


def _string(buf: memoryview, span: tuple[int, int], at: int) -> str:
    try:
        return _utf8(bytes(buf[span[0]:span[1]]))
    except UnicodeDecodeError:
        raise WireError("string is not valid UTF-8", at) from None


def decode_metadata(buf: memoryview, start: int, stop: int) -> dict:
    meta: dict[str, Any] = {"version": "", "attrs": {}, "attr_types": {}}
    for field, wire, value, at in iter_fields(buf, start, stop):
        if field == _META_VERSION:
            _expect(wire, LEN, field, at, "GlobalMetadata.version")
            meta["version"] = _string(buf, value, at)
        elif field == _META_ATTR:
            _expect(wire, LEN, field, at, "GlobalMetadata.attr")
            _add_attr(meta, *_decode_attr(buf, *value))
    return meta


def decode_node(buf: memoryview, start: int, stop: int) -> dict:
    node: dict[str, Any] = {"id": 0, "name": "", "type": NODE_TYPES[0], "ctrl_deps": [],
                            "data_deps": [], "start_time_micros": 0, "duration_micros": 0,
                            "inputs": None, "outputs": None, "attrs": {}, "attr_types": {}}
    scalars = {_ID: "id", _TYPE: "type", _START: "start_time_micros",
               _DURATION: "duration_micros"}
    for field, wire, value, at in iter_fields(buf, start, stop):
        if field in scalars:
            _expect(wire, VARINT, field, at, f"Node.{scalars[field]}")
            if field == _TYPE:
                if value >= len(NODE_TYPES):
                    raise WireError(f"unknown node type {value} (known: 0..7, "
                                    f"{', '.join(NODE_TYPES)})", at)
                value = NODE_TYPES[value]
            node[scalars[field]] = value
        elif field in (_CTRL_DEPS, _DATA_DEPS):
            key = "ctrl_deps" if field == _CTRL_DEPS else "data_deps"
            if wire == LEN:  # packed (proto3's default) ...
                node[key].extend(iter_packed(buf, value[0], value[1], VARINT))
            else:            # ... or one varint per element
                _expect(wire, VARINT, field, at, f"Node.{key}")
                node[key].append(value)
        elif field == _NAME:
            _expect(wire, LEN, field, at, "Node.name")
            node["name"] = _string(buf, value, at)
        elif field in (_INPUTS, _OUTPUTS):
            _expect(wire, LEN, field, at, "Node.inputs/outputs")
            io = dict.fromkeys(_IOINFO, "")
            for sub, sub_wire, sub_value, sub_at in iter_fields(buf, *value):
                if 1 <= sub <= len(_IOINFO):
                    _expect(sub_wire, LEN, sub, sub_at, "IOInfo")
                    io[_IOINFO[sub - 1]] = _string(buf, sub_value, sub_at)
            node["inputs" if field == _INPUTS else "outputs"] = io
        elif field == _ATTR:
            _expect(wire, LEN, field, at, "Node.attr")
            _add_attr(node, *_decode_attr(buf, *value))
        # other fields: newer schema versions; skipped like any protobuf reader does
    return node


def _add_attr(target: dict, name: str, kind: str, value: Any) -> None:
    if name not in target["attrs"]:
        target["attrs"][name] = value
        target["attr_types"][name] = kind


def _decode_attr(buf: memoryview, start: int, stop: int) -> tuple[str, str, Any]:
    name, kind, value = "", "", None
    for field, wire, raw, at in iter_fields(buf, start, stop):
        if field == _ATTR_NAME:
            _expect(wire, LEN, field, at, "AttributeProto.name")
            name = _string(buf, raw, at)
        elif 3 <= field < 3 + 2 * len(_SCALARS):
            scalar = _SCALARS[(field - 3) // 2]
            scalar_wire, decode, _ = _CODECS[scalar]
            if (field - 3) % 2 == 0:
                _expect(wire, scalar_wire, field, at, f"{scalar}_val")
                kind, value = f"{scalar}_val", _decode_scalar(buf, scalar, raw, at)
            else:
                _expect(wire, LEN, field, at, f"{scalar}_list")
                kind, value = f"{scalar}_list", []
                for sub, sub_wire, sub_raw, sub_at in iter_fields(buf, *raw):
                    if sub != 1:
                        continue
                    if sub_wire == LEN and scalar_wire != LEN:
                        value.extend(decode(x)
                                     for x in iter_packed(buf, sub_raw[0], sub_raw[1], scalar_wire))
                    else:
                        _expect(sub_wire, scalar_wire, sub, sub_at, f"{scalar}_list value")
                        value.append(_decode_scalar(buf, scalar, sub_raw, sub_at))
    return name, kind, value


def _decode_scalar(buf: memoryview, scalar: str, raw: Any, at: int) -> Any:
    if scalar == "string":
        return _string(buf, raw, at)
    if scalar == "bytes":
        return bytes(buf[raw[0]:raw[1]])
    return _CODECS[scalar][1](raw)


def encode_metadata(version: str, attrs: Mapping[str, Any]) -> bytes:
    out = bytearray(len_field(_META_VERSION, version.encode("utf-8")) if version else b"")
    for name, value in attrs.items():
        out += len_field(_META_ATTR, _encode_attr(name, _infer_kind(value), value))
    return bytes(out)


def encode_node(node: Mapping[str, Any]) -> bytes:
    out = bytearray()
    kind = node.get("type", 0)
    type_value = NODE_TYPES.index(kind) if isinstance(kind, str) else int(kind)
    if not 0 <= type_value < len(NODE_TYPES):
        raise ValueError(f"unknown node type {kind!r}")
    for field, value in ((_ID, node.get("id", 0)), (_TYPE, type_value),
                         (_START, node.get("start_time_micros", 0)),
                         (_DURATION, node.get("duration_micros", 0))):
        if value < 0:
            raise ValueError(f"negative value {value} for Node field {field}")
        if value:
            out += varint_field(field, int(value))
    if node.get("name"):
        out += len_field(_NAME, node["name"].encode("utf-8"))
    for field, key in ((_CTRL_DEPS, "ctrl_deps"), (_DATA_DEPS, "data_deps")):
        deps = [int(d) for d in node.get(key, ())]
        if any(d < 0 for d in deps):
            raise ValueError(f"negative node id in {key}")
        if deps:
            out += len_field(field, b"".join(encode_varint(d) for d in deps))
    for field, key in ((_INPUTS, "inputs"), (_OUTPUTS, "outputs")):
        if node.get(key) is not None:
            out += len_field(field, b"".join(
                len_field(i + 1, node[key].get(sub, "").encode("utf-8"))
                for i, sub in enumerate(_IOINFO) if node[key].get(sub)))
    kinds = node.get("attr_types") or {}
    for name, value in (node.get("attrs") or {}).items():
        kind = kinds.get(name) or _infer_kind(value)
        out += len_field(_ATTR, _encode_attr(name, kind, value))
    return bytes(out)


def _infer_kind(value: Any) -> str:
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


def _encode_attr(name: str, kind: str, value: Any) -> bytes:
    scalar, _, form = kind.rpartition("_")
    if scalar not in _CODECS or form not in ("val", "list"):
        raise ValueError(f"unknown attribute kind {kind!r}")
    index = _SCALARS.index(scalar)
    wire, _, encode = _CODECS[scalar]

    def raw(v: Any) -> Any:
        if scalar in _INT_RANGES:
            low, high = _INT_RANGES[scalar]
            if not low <= int(v) < high:
                raise ValueError(f"attribute '{name}': {v} does not fit {scalar}")
        return encode(v)

    if form == "val":
        field = 3 + 2 * index
        body = (varint_field(field, raw(value)) if wire == VARINT else
                len_field(field, raw(value)) if wire == LEN else
                fixed_field(field, raw(value)))
    else:
        if wire == LEN:
            payload = b"".join(len_field(1, raw(v)) for v in value)
        elif value:
            payload = len_field(1, b"".join(
                encode_varint(raw(v)) if wire == VARINT else raw(v) for v in value))
        else:
            payload = b""
        body = len_field(4 + 2 * index, payload)
    return len_field(_ATTR_NAME, name.encode("utf-8")) + body
