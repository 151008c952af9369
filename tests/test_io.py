"""Reading and writing user files (flowsim._io, flowsim._atomic): bounded YAML / JSON, one
clear error per bad file, atomic outputs that never follow a planted symlink."""

from __future__ import annotations

import os
import stat
import tempfile
import time

import numpy as np
import pytest

import flowsim
from flowsim import _io
from flowsim._io import (
    MAX_DEPTH,
    atomic_output,
    check_structure,
    parse_data,
    read_mapping,
    read_text,
    write_bytes_atomic,
    write_text_atomic,
)
from flowsim.errors import ConfigError, ConfigTypeError

BOMB = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10)
                  + "]\n" for i in range(9)))


def refused(text, *, json_syntax=False, match=None):
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=match) as info:
        parse_data(text, source="f.yml", json_syntax=json_syntax)
    assert time.perf_counter() - start < 2.0
    assert "\n" not in str(info.value) and str(info.value).startswith("f.yml: ")
    return str(info.value)


# ------------------------------------------------------------------------------ reading
@pytest.mark.parametrize("json_syntax", [False, True])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000, 100_000])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(depth, json_syntax):
    refused("[" * depth + "]" * depth, json_syntax=json_syntax, match="nested more than")


def test_nesting_up_to_the_bound_is_read():
    depth = MAX_DEPTH - 1
    data = parse_data("a: " + "[" * depth + "]" * depth, source="f.yml")
    assert isinstance(data["a"], list)


def test_an_alias_bomb_is_refused_without_expanding_it():
    refused(BOMB, match="alias bomb")


def test_a_merge_key_bomb_is_refused():
    text = "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10}\n" + "".join(
        f"m{i + 1}: &m{i + 1} {{<<: [" + ", ".join([f"*m{i}"] * 10) + "]}\n" for i in range(8))
    refused(text, match="alias bomb")


def test_recursive_aliases_are_refused():
    refused("a: &a [1, *a]", match="contains itself")


def test_aliases_and_merge_keys_within_bounds_work():
    data = parse_data("base: &b {x: 1, y: 2}\nd: {<<: *b, x: 3}\nl: [*b, *b]\n", source="f")
    assert data["d"] == {"x": 3, "y": 2} and data["l"] == [{"x": 1, "y": 2}] * 2


@pytest.mark.parametrize("text, json_syntax, key", [
    ("a: 1\nb: 2\na: 3\n", False, "'a' at line 3"),
    ("outer:\n  x: 1\n  x: 2\n", False, "'x' at line 3"),
    ("{1: a, 01: b}", False, "1 at line 1"),
    ('{"a": 1, "b": {"c": 1, "c": 2}}', True, "'c'"),
])
def test_duplicate_keys_are_errors_naming_the_key(text, json_syntax, key):
    assert f"duplicate key {key}" in refused(text, json_syntax=json_syntax)


@pytest.mark.parametrize("json_syntax", [False, True])
def test_thousands_of_digits_are_one_line_errors(json_syntax):
    text = '{"a": ' + "7" * 5000 + "}"
    refused(text, json_syntax=json_syntax, match="unreadable value")


def test_dates_stay_text():
    assert parse_data("when: 2024-01-01\n", source="f") == {"when": "2024-01-01"}


def test_syntax_errors_name_file_and_line():
    assert "YAML syntax error at line 2" in refused("a: [1\nb: 2\n")
    assert "JSON syntax error at line 1" in refused("{", json_syntax=True)


def test_files_are_utf8_and_errors_name_them(tmp_path):
    path = tmp_path / "w.yml"
    path.write_bytes(b"name: ok\n\xff\xfe oops\n")
    with pytest.raises(ConfigError, match=r"w\.yml: not UTF-8 text \(byte 0xff at line 2\)"):
        read_mapping(path, what="workload")
    path.write_bytes(b"\xef\xbb\xbfname: bom\n")           # a byte-order mark is fine
    assert read_mapping(path, what="workload") == {"name": "bom"}
    with pytest.raises(ConfigError, match="workload file not found"):
        read_text(tmp_path / "missing.txt", "workload")
    with pytest.raises(ConfigError, match="is a directory"):
        read_text(tmp_path, "workload")
    with pytest.raises(ConfigTypeError, match="expected a path"):
        read_text(5, "workload")
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping of keys to values"):
        read_mapping(path, what="workload")


def test_files_larger_than_the_bound_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.yml"
    path.write_text("a: " + "x" * 200)
    with pytest.raises(ConfigError, match="larger than"):
        read_mapping(path, what="network config")


def test_python_mappings_are_checked_like_files():
    shared = [1] * 10
    for _ in range(8):
        shared = [shared] * 10                  # 10**9 values once expanded
    with pytest.raises(ConfigError, match="alias bomb"):
        check_structure({"a": shared}, "<spec>")
    loop: list = []
    loop.append(loop)
    with pytest.raises(ConfigError, match="contains itself"):
        check_structure({"a": loop}, "<spec>")
    with pytest.raises(ConfigError, match="more than 4000 digits"):
        check_structure({"a": [10**5000]}, "<spec>")
    small = [[1, 2]] * 3
    check_structure({"a": [small, {"b": 3}], "c": small}, "<spec>")


# ------------------------------------------------------------------------------ writing
def test_atomic_write_and_no_leftovers(tmp_path):
    target = tmp_path / "out.json"
    write_text_atomic(target, "héllo")
    assert target.read_text(encoding="utf-8") == "héllo"
    write_bytes_atomic(target, b"again")
    assert target.read_bytes() == b"again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_new_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    target = tmp_path / "out.txt"
    write_text_atomic(target, "x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    target.chmod(0o600)
    write_text_atomic(target, "y")                # an existing file keeps its permissions
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failing_writer_leaves_the_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "result.nc"
    target.write_text("previous result")
    for error in (RuntimeError("disk full"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            with atomic_output(target) as tmp:
                tmp.write_text("half a file")
                raise error
        assert target.read_text() == "previous result"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["result.nc"]


def test_planted_symlinks_are_never_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.json"
    # every name an attacker can guess: the old predictable one, and the first name the
    # random generator will produce (forced here), with and without the extension
    guessed = [f".out.json.tmp{os.getpid()}", ".out.json.fixed.json", ".out.json.fixed"]
    for name in guessed:
        (tmp_path / name).symlink_to(victim)
    names = iter(["fixed", "fixed", "other1", "other2"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    write_text_atomic(target, "result")
    assert victim.read_text() == "precious" and target.read_text() == "result"
    for name in guessed:
        assert (tmp_path / name).is_symlink()  # neither followed nor replaced


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.json"
    target.symlink_to(victim)
    write_text_atomic(target, "result")
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == "result"


def test_bad_targets_name_the_option(tmp_path):
    with pytest.raises(ConfigError, match=r"argument -o: .* is a folder, expected a file"):
        write_text_atomic(tmp_path, "x", option="-o")
    with pytest.raises(ConfigError, match="argument --trace: folder .*nowhere does not exist"):
        write_text_atomic(tmp_path / "nowhere" / "t.json", "x", option="--trace")
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        with atomic_output(__file__, directory=True):
            pass


def test_folder_outputs_are_replaced_whole(tmp_path):
    store = tmp_path / "out.zarr"
    store.mkdir()
    (store / "old").write_text("stale")
    with atomic_output(store, directory=True) as tmp:
        (tmp / "new").write_text("fresh")
    assert sorted(p.name for p in store.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_netcdf_results_go_through_the_atomic_writer(tmp_path):
    victim = tmp_path / "victim.nc"
    victim.write_text("precious")
    target = tmp_path / "r.nc"
    (tmp_path / f".r.nc.tmp{os.getpid()}").symlink_to(victim)
    ds = flowsim.simulate_collective("ring8", "all_reduce", "1MiB")
    from flowsim.results import write_dataset
    write_dataset(ds, target)
    assert victim.read_text() == "precious"
    import xarray as xr
    with xr.open_dataset(target) as back:
        assert float(back.time_ns) == float(ds.time_ns)
    assert np.isfinite(float(ds.time_ns))
