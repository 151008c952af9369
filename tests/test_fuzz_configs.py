"""Fuzzing every input format: malformed files end, through the command line, with exit
status 2 and exactly one line on stderr (no traceback) within seconds, and through the Python
API with a FlowsimError.

Three sources of bad files (formats and mutations in ``fuzz_formats.py``):

* a corpus of hand-written malformed files per format, written in the test;
* every (validated key, bad value) pair of every format, sampled by hypothesis, on the
  bundled configs (or a small valid base where nothing is bundled);
* broken files: nesting past the bound, a duplicate key, bytes that are not UTF-8, an alias
  bomb.

A handful also run as a real subprocess, where a traceback or a hang could not hide.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from fuzz_formats import (
    BOMB,
    FORMATS,
    LIMIT_S,
    STRUCTURAL,
    Format,
    assert_refused,
    bad_values,
    broken,
    dump,
    make_folder,
    mutated,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowsim.sweep import load_spec
from flowsim.workload.astra_text import read_astra_text
from flowsim.workload.generators import GENERATORS

BY_NAME = {fmt.name: fmt for fmt in FORMATS}

#: Hand-written malformed files, by format.
CORPUS: dict[str, list[str | bytes]] = {
    "network": ["topology: [Ring\nnpus_count: 8\n", "just text\n", "- [Ring]\n",
                "topology: [Ring]\nnpus_count: [8]\nlatency: [1]\n",
                "topology: [Ring]\nnpus_count: [1]\nbandwidth: [1]\nlatency: [1]\n",
                "topology: [Torus]\nnpus_count: [8]\nbandwidth: [1]\nlatency: [1]\n",
                "topology: []\nnpus_count: []\nbandwidth: []\nlatency: []\n",
                "topology: {Ring: 1}\nnpus_count: [8]\nbandwidth: [1]\nlatency: [1]\n",
                "topology: [Ring, Ring]\nnpus_count: [8]\nbandwidth: [1]\nlatency: [1]\n",
                "topology: [Ring]\nnpus_count: [2048]\nbandwidth: [1e-300]\nlatency: [1]\n",
                "", b"\x00\x01\x02", b"topology: [Ring]\r\nnpus_count: [\xc3\x28]\n"],
    "astra1_network": ['{"topology-name": "Torus"}', '{"units-count": [8]}', "[1, 2]",
                       '{"topology-name": "Hierarchical", "bogus": 1}', "{", "NaN"],
    "system": ['{"preferred-dataset-splits": "four"}', '{"endpoint-delay": -10}',
               '{"all-reduce-implementation": ["ring", "oneRing"]}', '["LIFO"]',
               '{"scheduling-policy": "RANDOM"}', '{"local-mem-bw": 0}', '{"1": 2, "1": 3}',
               '{"model-shared-bus": "yes"}', '{"preferred-dataset-splits": 1e9}'],
    "astra1_system": ["endpoint-delay 10\n", "endpoint-delay:\n", "colour: blue\n",
                      "preferred-dataset-splits: 0\n", "all-reduce-implementation: _\n",
                      "scheduling-policy: RANDOM\n", b"endpoint-delay: \xff\n"],
    "text_workload": ["", "PIPELINE\n1\n", "DATA\nx\n", "DATA\n0\nL0 -1 1 NONE 0 1 NONE 0 1 "
                      "ALLREDUCE 8 0\n", "DATA\n1\nL0 -1 1 NONE 0\n",
                      "HYBRID_DLRM 99\n1\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n",
                      "HYBRID_TRANSFORMER\n1\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n",
                      "DATA\n1\nL0 -1 1e308 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n"],
    "yaml_graph": ["ops: []\n", "ops: 5\n", "programs: [{npus: [0, 99], ops: [{id: 0, kind: "
                   "compute}]}]\n", "ops: [{id: 0, kind: compute, deps: [0]}]\n",
                   "ops: [{id: 0, kind: send, size: 8}]\n", "name: x\n",
                   "programs: [{npus: {stop: 1000000000000}, ops: [{id: 0, kind: compute}]}]\n",
                   "ops: [{id: 0, kind: compute, duration: 1.0e+308}]\n"],
    "transformer": ["generator: transformer\n", "generator: gpt\n",
                    "generator: transformer\nlayers: 96\nhidden: 8.0e+200\nsequence: 2048\n"
                    "micro_batch: 1\nmicro_batches: 16\ntp: 8\ndp: 8\npp: 16\n",
                    "generator: [transformer]\n"],
    "dlrm": ["generator: dlrm\nbottom_mlp: []\n", "generator: dlrm\nlayers: 2\n",
             "generator: dlrm\nroofline: 60\n", "generator: dlrm\nbatch_per_npu: -1\n"],
    "comm_group": ['{"1": [0, 9]}', '{"1": "all"}', '[[0, 1]]', '{"2": [0, 1]}',
                   '{"1": [0, 1], "1": [0, 1]}'],
    "memory": ['{"memory-type": ["MEMORY_POOL"]}', '{"memory-type": "SOMETIMES"}',
               '{"memory-type": "MEMORY_POOL"}', '{"memory-type": "MEMORY_POOL", '
               '"remote-mem-latency": 1, "remote-mem-bw": 1e-300}', '{"colour": 1}'],
    "fabric": ["fabric: 5\n", "fabric: {generator: hypercube}\n",
               "fabric: {generator: torus, dims: [2048, 2048], bandwidth: 1}\n",
               "fabric: {generator: leaf_spine, hosts: 300000, nic: {bandwidth: 50}}\n",
               "fabric: {generator: [torus], dims: [4], bandwidth: 1}\n",
               "fabric: {generator: fat_tree, k: 3, bandwidth: 1}\n"],
    "explicit_fabric": ["fabric: {npus: 2, links: [[npu0, npu1, 1, 1]], fail: [zzz]}\n",
                        "fabric: {npus: 3, links: [[npu0, npu1, 1, 1]]}\n",
                        "fabric: {npus: 2, links: [{src: npu0, dst: npu1, bandwidth: 1, "
                        "latency: 1, duplex: 'no'}]}\n",
                        "fabric: {npus: 2, links: [[npu0, npu0, 1, 1]]}\n"],
    "infragraph": ['{"infragraph": 5}', '{"infragraph": "/no/such/file.json"}',
                   '{"infragraph": {"devices": 5}}', '{"infragraph": {}, "logical_dim": [2]}'],
    "sweep": ["base: 5\n", "axes: {size: [1MiB]}\n", "base: {network: ring8}\naxes: 5\n",
              "base: {network: ring8}\nzip: {error: {size: [1MiB]}}\n",
              "base: {network: ring8, colour: red}\n",
              "base: {network: ring8}\naxes: {size: [1MiB, 1e400]}\n",
              "base: {network: ring8}\n" + BOMB],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("name, index", [(name, i) for name, files in CORPUS.items()
                                         for i in range(len(files))])
def test_malformed_corpus_files_are_one_line_errors(folder, name, index):
    text = CORPUS[name][index]
    assert_refused(BY_NAME[name], text if isinstance(text, bytes) else text.encode(), folder)


def _mutations(fmt: Format):
    value = st.sampled_from(fmt.keys).flatmap(
        lambda key: st.tuples(st.just("value"), st.just(key[0]),
                              st.sampled_from(bad_values(key[1], fmt.text_format))))
    structural = st.tuples(st.just("broken"), st.sampled_from(STRUCTURAL),
                           st.integers(0, 1 << 20))
    return st.one_of(value, structural)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
@settings(max_examples=15, deadline=2000 * LIMIT_S, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_configs_are_one_line_errors(folder, fmt, data):
    how, where, what = data.draw(_mutations(fmt))
    contents = mutated(fmt, where, what) if how == "value" else broken(fmt, where, what)
    assert_refused(fmt, contents, folder)


def _parse_generator(path, folder):
    spec = yaml.safe_load(path.read_text())
    name = spec.pop("generator")
    return GENERATORS[name].parse(spec, str(path))


#: Formats whose base takes long to run: checked by parsing only.
LIGHT_CHECKS = {"transformer": _parse_generator, "dlrm": _parse_generator,
                "text_workload": lambda path, folder: read_astra_text(path),
                "sweep": lambda path, folder: load_spec(path)}


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_every_base_is_valid(folder, fmt):
    """The mutations are the only reason for the errors: every base file is accepted."""
    path = folder / f"base-{fmt.name}{fmt.suffix}"
    path.write_bytes(dump(fmt.base(), fmt.suffix))
    LIGHT_CHECKS.get(fmt.name, fmt.api)(path, folder)


@pytest.mark.parametrize("name, contents", [
    ("network", BOMB.encode()),
    ("system", b'{"a": ' + b"[" * 20000 + b"]" * 20000 + b"}"),
    ("text_workload", b"DATA\n1\nL0 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\xff\n"),
    ("system", b'{"boost-mode": [1]}'),
])
def test_a_few_in_a_real_process(folder, name, contents):
    fmt = BY_NAME[name]
    path = folder / f"sub-{name}{fmt.suffix}"
    path.write_bytes(contents)
    result = subprocess.run([sys.executable, "-m", "flowsim.cli", *fmt.cli(path, folder)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowsim: error: "), result.stderr[-2000:]
