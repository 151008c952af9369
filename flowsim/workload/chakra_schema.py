"""Chakra's execution-trace schema (``et_def.proto``) as protobuf message classes, built in code.

The descriptors are made here from the field table below (no ``protoc``, no generated
``_pb2`` module) in a private descriptor pool, so that a user's own copy of Chakra's
generated module, registered in protobuf's default pool under the same package name, does not
clash with flowsim's.

Field numbers: ``schema/protobuf/et_def.proto`` of mlcommons/chakra (21585d8f) and
astra-sim/chakra (bf222b23), which agree; symbolic_tensor_graph vendors the same file.
``syntax = "proto3"``, ``package ChakraProtoMsg``::

    message AttributeProto { string name = 1; string doc_string = 2;
                             oneof value { <s>_val = 3 + 2i; <S>List <s>_list = 4 + 2i; } }
        for the i-th scalar type s of SCALARS; <S>List { repeated <s> values = 1; }
    message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
    message Node { uint64 id = 1; string name = 2; NodeType type = 3;
                   repeated uint64 ctrl_deps = 4; repeated uint64 data_deps = 5;
                   uint64 start_time_micros = 6; uint64 duration_micros = 7;
                   IOInfo inputs = 8; IOInfo outputs = 9; repeated AttributeProto attr = 10; }
    message IOInfo { string values = 1; string shapes = 2; string types = 3; }

``comm_type``, ``comm_size``, ``pg_name`` and the other node properties are attributes, not
fields: ASTRA-sim looks them up by name.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: Scalar types of ``AttributeProto``'s oneof, in field-number order.
SCALARS = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
#: ``enum NodeType`` (value = index).
NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE",
              "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE")
#: ``enum CollectiveCommType`` (99: the older schema's INVALID_COMM_TYPE).
COLLECTIVE_COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER",
                         5: "BROADCAST", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER",
                         8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER", 99: "INVALID_COMM_TYPE"}
#: Integer ranges of the integer scalar types (the encoder's checks; half-open).
INT_RANGES = {"int32": (-(1 << 31), 1 << 31), "int64": (-(1 << 63), 1 << 63),
              "uint32": (0, 1 << 32), "uint64": (0, 1 << 64),
              "sint32": (-(1 << 31), 1 << 31), "sint64": (-(1 << 63), 1 << 63),
              "fixed32": (0, 1 << 32), "fixed64": (0, 1 << 64),
              "sfixed32": (-(1 << 31), 1 << 31), "sfixed64": (-(1 << 63), 1 << 63)}

_PACKAGE = "ChakraProtoMsg"
_F = descriptor_pb2.FieldDescriptorProto


def _list_name(scalar: str) -> str:
    return scalar[0].upper() + scalar[1:] + "List"


def _field(message, name: str, number: int, kind: str, *, repeated: bool = False,
           oneof: int | None = None) -> None:
    """Add a field; ``kind`` is a scalar name, or a message / enum name of the package."""
    field = message.field.add(name=name, number=number,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if kind in SCALARS:
        field.type = getattr(_F, f"TYPE_{kind.upper()}")
    else:
        field.type = _F.TYPE_ENUM if kind == "NodeType" else _F.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{kind}"
    if oneof is not None:
        field.oneof_index = oneof


def _schema() -> descriptor_pb2.FileDescriptorProto:
    """``et_def.proto`` as a file descriptor (see the module docstring)."""
    file = descriptor_pb2.FileDescriptorProto(name="flowsim_chakra_et_def.proto",
                                              package=_PACKAGE, syntax="proto3")
    attr = file.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    _field(attr, "name", 1, "string")
    _field(attr, "doc_string", 2, "string")
    for i, scalar in enumerate(SCALARS):
        _field(attr, f"{scalar}_val", 3 + 2 * i, scalar, oneof=0)
        _field(attr, f"{scalar}_list", 4 + 2 * i, _list_name(scalar), oneof=0)
        wrapper = file.message_type.add(name=_list_name(scalar))
        _field(wrapper, "values", 1, scalar, repeated=True)
    meta = file.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, "string")
    _field(meta, "attr", 2, "AttributeProto", repeated=True)
    node_type = file.enum_type.add(name="NodeType")
    for value, name in enumerate(NODE_TYPES):
        node_type.value.add(name=name, number=value)
    node = file.message_type.add(name="Node")
    for number, (name, kind) in enumerate((
            ("id", "uint64"), ("name", "string"), ("type", "NodeType"), ("ctrl_deps", "uint64"),
            ("data_deps", "uint64"), ("start_time_micros", "uint64"),
            ("duration_micros", "uint64"), ("inputs", "IOInfo"), ("outputs", "IOInfo"),
            ("attr", "AttributeProto")), start=1):
        _field(node, name, number, kind, repeated=name in ("ctrl_deps", "data_deps", "attr"))
    io = file.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io, name, number, "string")
    return file


def _classes() -> tuple[Any, ...]:  # classes built at run time: fields unknown to mypy
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_schema())
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{n}"))
                 for n in ("GlobalMetadata", "Node", "AttributeProto"))


#: The message classes (protobuf ``Message`` subclasses).
GlobalMetadata, Node, AttributeProto = _classes()
#: Field numbers of each message (unknown-field checks name the field).
FIELD_NAMES = {cls: {f.number: f.name for f in cls.DESCRIPTOR.fields}
               for cls in (GlobalMetadata, Node)}
