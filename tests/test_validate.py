"""The validation toolkit (flowsim._validate): every reader, its argument order, its one
message shape, and what it refuses."""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import numpy as np
import pytest

from flowsim._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    MAX_INT,
    REQUIRED,
    as_bool,
    as_choice,
    as_int,
    as_list,
    as_mapping,
    as_number,
    as_str,
    check_unknown_keys,
    choices_of,
    read_bool,
    read_choice,
    read_int,
    read_list,
    read_mapping,
    read_number,
    read_str,
    unknown_keys,
)
from flowsim.errors import ConfigError, ConfigTypeError, config_error

SRC = "cfg.yml"


def message(call):
    with pytest.raises(ConfigError) as info:
        call()
    return str(info.value)


# ------------------------------------------------------------------------------ integers
@pytest.mark.parametrize("value, expected", [
    (8, 8), (np.int64(8), 8), (np.uint16(3), 3), (8.0, 8), (np.float32(4.0), 4),
    (MAX_INT, MAX_INT),
])
def test_int_accepts_integers_numpy_integers_and_whole_floats(value, expected):
    got = as_int(value, source=SRC, key="k")
    assert got == expected and type(got) is int


@pytest.mark.parametrize("value", [2.5, math.nan, math.inf, -math.inf, 1e300, 10**400,
                                   MAX_INT + 1, -1])
def test_int_refuses_fractions_non_finite_huge_and_out_of_range(value):
    text = message(lambda: as_int(value, source=SRC, key="k", minimum=0))
    assert text.startswith("cfg.yml: key 'k': expected an integer >= 0")
    assert len(text) < 200  # a 400-digit int is described, not printed


@pytest.mark.parametrize("value", [True, "8", [8], {"a": 1}, None, b"8"])
def test_int_refuses_other_types_as_type_errors(value):
    with pytest.raises(ConfigTypeError) as info:
        as_int(value, source=SRC, key="k")
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_int_range_is_in_the_message():
    text = message(lambda: as_int(9, source=SRC, key="k", minimum=1, maximum=8))
    assert "expected an integer >= 1 (at most 8), found 9" in text
    text = message(lambda: as_int(10**20, source=SRC, key="k", minimum=1))
    assert f"(at most {MAX_INT})" in text


# ------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("value", [0, 0.5, np.float64(2), np.int32(3), 1e12])
def test_number_accepts_finite_numbers(value):
    got = as_number(value, source=SRC, key="k", minimum=0)
    assert got == float(value) and type(got) is float


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400, -1e-9])
def test_number_refuses_non_finite_huge_and_negative(value):
    assert "key 'k': expected a number >= 0" in message(
        lambda: as_number(value, source=SRC, key="k", minimum=0))


@pytest.mark.parametrize("value", [5e-324, 0.0, 2e12, 1e308])
def test_bandwidth_range(value):
    text = message(lambda: as_number(value, source=SRC, key="bandwidth[0]",
                                     quantity=BANDWIDTH_GBPS))
    assert "expected a number > 0 (GB/s, at least 1e-06 and at most 1e+12)" in text


def test_latency_range_and_positive_without_minimum():
    assert as_number(0, source=SRC, key="k", quantity=LATENCY_NS) == 0.0
    assert "a number >= 0 (ns, at most 1e+12)" in message(
        lambda: as_number(1e308, source=SRC, key="k", quantity=LATENCY_NS))
    assert "a number in (0, 1]" in message(
        lambda: as_number(1.5, source=SRC, key="k", positive=True, maximum=1.0))
    assert "a number > 0" in message(lambda: as_number(0, source=SRC, key="k", positive=True))


def test_number_text_only_when_asked():
    assert as_number("1e12", source=SRC, key="k", text=True) == 1e12
    with pytest.raises(ConfigTypeError):
        as_number("1e12", source=SRC, key="k")
    with pytest.raises(ConfigTypeError):
        as_number("fast", source=SRC, key="k", text=True)


@pytest.mark.parametrize("value", [True, "1", [1], None, {"x": 1}])
def test_number_refuses_other_types(value):
    with pytest.raises(ConfigTypeError):
        as_number(value, source=SRC, key="k")


# ------------------------------------------------------------------------------ booleans
def test_bool_only_booleans():
    assert as_bool(True, source=SRC, key="k") is True
    assert as_bool(np.bool_(False), source=SRC, key="k") is False
    for value in ("no", "yes", "false", 0, 1, 2, [True], None):
        assert "key 'k': expected true or false" in message(
            lambda v=value: as_bool(v, source=SRC, key="k"))


def test_bool_zero_one_where_astra_sim_uses_it():
    assert as_bool(1, source=SRC, key="k", zero_one=True) is True
    assert as_bool("0", source=SRC, key="k", zero_one=True) is False
    assert as_bool(True, source=SRC, key="k", zero_one=True) is True
    for value in (2, 1.0, "2", "no", [1]):
        assert "true or false (or 0 / 1)" in message(
            lambda v=value: as_bool(v, source=SRC, key="k", zero_one=True))


# ------------------------------------------------------------------------------ choices
Colour = Literal["red", "Green"]


def test_choice_from_a_literal_a_tuple_or_a_mapping():
    assert choices_of(Colour) == ("red", "Green")
    assert as_choice("red", Colour, source=SRC, key="k") == "red"
    assert as_choice("green", ("red", "Green"), source=SRC, key="k",
                     case_insensitive=True) == "Green"
    assert as_choice("R", {"R": "red", "G": "green"}, source=SRC, key="k") == "red"
    assert "expected one of red, Green, found 'green'" in message(
        lambda: as_choice("green", Colour, source=SRC, key="k"))


@pytest.mark.parametrize("value", [["red"], {"red": 1}, {"red"}, None, 3])
def test_choice_refuses_unhashable_and_non_text_values(value):
    with pytest.raises(ConfigError, match="key 'k': expected one of red, Green"):
        as_choice(value, Colour, source=SRC, key="k")


# ------------------------------------------------------------------------------ text, lists
def test_str():
    assert as_str("a", source=SRC, key="k") == "a"
    assert as_str("", source=SRC, key="k", nonempty=False) == ""
    for value in ("", "x" * 5000):
        with pytest.raises(ConfigError, match="a non-empty string"):
            as_str(value, source=SRC, key="k")
    with pytest.raises(ConfigTypeError):
        as_str(5, source=SRC, key="k")


def test_list_with_item_reader_and_lengths():
    item = partial(as_int, minimum=2)
    assert as_list([2, 3.0], item, source=SRC, key="k") == [2, 3]
    assert as_list(4, item, source=SRC, key="k", scalar=True) == [4]
    assert "key 'k[1]': expected an integer >= 2" in message(
        lambda: as_list([2, 1], item, source=SRC, key="k"))
    assert "a list of 1 to 2 items" in message(
        lambda: as_list([2, 2, 2], item, source=SRC, key="k", min_length=1, max_length=2))
    assert "(not empty)" in message(lambda: as_list([], source=SRC, key="k", min_length=1))
    with pytest.raises(ConfigTypeError):
        as_list("22", item, source=SRC, key="k")


def test_mapping():
    assert as_mapping({"a": 1}, source=SRC, key="k") == {"a": 1}
    with pytest.raises(ConfigTypeError, match="key 'k': expected a mapping"):
        as_mapping([1], source=SRC, key="k")


# ------------------------------------------------------------------------------ readers
def test_readers_share_one_argument_order_and_defaults():
    data = {"n": 3, "x": 2.5, "b": False, "c": "FIFO", "s": "hi", "l": [1, 2], "m": {"a": 1},
            "nil": None}
    assert read_int(data, "n", source=SRC, minimum=1) == 3
    assert read_number(data, "x", source=SRC, minimum=0) == 2.5
    assert read_bool(data, "b", source=SRC) is False
    assert read_choice(data, "c", ("LIFO", "FIFO"), source=SRC) == "FIFO"
    assert read_str(data, "s", source=SRC) == "hi"
    assert read_list(data, "l", as_int, source=SRC) == [1, 2]
    assert read_mapping(data, "m", source=SRC) == {"a": 1}
    # absent keys: the default as it is (not validated: a computed default is trusted)
    assert read_int(data, "absent", source=SRC, default=None) is None
    assert read_mapping(data, "nil", source=SRC, default={}) == {}
    for reader in (read_int, read_number, read_bool, read_str, read_mapping):
        assert "cfg.yml: missing key 'fabric.absent'" in message(
            lambda r=reader: r(data, "absent", source=SRC, prefix="fabric."))
    assert REQUIRED is not None and repr(REQUIRED) == "REQUIRED"


def test_prefix_names_the_nested_key():
    assert "key 'fabric.nic.bandwidth'" in message(lambda: read_number(
        {"bandwidth": -1}, "bandwidth", source=SRC, prefix="fabric.nic.",
        quantity=BANDWIDTH_GBPS))


def test_unknown_keys():
    check_unknown_keys({"a": 1}, ("a", "b"), source=SRC)
    with pytest.raises(ConfigError, match="cfg.yml: unknown key 'fabric.c'"):
        check_unknown_keys({"a": 1, "d": 2, "c": 4}, ("a", "b"), source=SRC, prefix="fabric.")
    with pytest.raises(ConfigError, match="unknown key '3'"):
        check_unknown_keys({3: 4}, ("a",), source=SRC)
    assert unknown_keys({"a": 1, "z": 2, None: 3}, ("a",)) == ["z", "None"]


def test_config_error_carries_its_parts():
    error = config_error("f.yml", "k", "an integer", 3.5)
    assert (error.key, error.expected) == ("k", "an integer")
    assert str(config_error("argument", "dims", "a list", ...)) == \
        "argument 'dims' is missing: expected a list"
    assert isinstance(config_error(None, "k", "x", 1, cls=ConfigTypeError), TypeError)


# ------------------------------------------------------------------------------ entry points
def _entry_points():
    import flowsim
    from flowsim.sweep import load_spec
    from flowsim.system import parse_system_config
    from flowsim.system.astra1 import parse_astra1_system
    from flowsim.topology import parse_network_config, parse_network_mapping
    from flowsim.topology.astra1 import parse_astra1_network
    from flowsim.workload.astra_text import parse_astra_text
    from flowsim.workload.generators import parse_dlrm, parse_transformer
    from flowsim.workload.memory import load_memory, parse_memory_config
    from flowsim.workload.roofline import Roofline, parse_roofline
    return {
        "load_network(5)": lambda: flowsim.load_network(5),
        "load_network(None)": lambda: flowsim.load_network(None),
        "load_system(5)": lambda: flowsim.load_system(5),
        "parse_network_config(5)": lambda: parse_network_config(5),
        "parse_network_mapping([])": lambda: parse_network_mapping([]),
        "parse_astra1_network('x')": lambda: parse_astra1_network("x"),
        "parse_system_config('x')": lambda: parse_system_config("x"),
        "parse_astra1_system(5)": lambda: parse_astra1_system(5),
        "parse_memory_config([1])": lambda: parse_memory_config([1]),
        "load_memory(5)": lambda: load_memory(5),
        "parse_astra_text(5)": lambda: parse_astra_text(5),
        "parse_dlrm([1])": lambda: parse_dlrm([1], "argument"),
        "parse_transformer(None)": lambda: parse_transformer(None, "argument"),
        "load_spec(5)": lambda: load_spec(5),
        "parse_roofline(5)": lambda: parse_roofline(5, "argument"),
        "Roofline('x')": lambda: Roofline("x", 1e12, 1.0),
        "model=[1]": lambda: flowsim.simulate_collective("ring8", "all_reduce", 1, model=[1]),
        "size=[1]": lambda: flowsim.simulate_collective("ring8", "all_reduce", [1]),
    }


@pytest.mark.parametrize("name", sorted(_entry_points()))
def test_wrong_typed_arguments_are_config_type_errors(name):
    with pytest.raises(ConfigTypeError) as info:
        _entry_points()[name]()
    assert isinstance(info.value, TypeError) and "\n" not in str(info.value)
