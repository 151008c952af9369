"""A launch script's literal shell variables (flowsim.workload.generators.shell_vars): read
as bash would assign them from top to bottom, never executed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowsim.workload.generators.shell_vars import shell_variables, substitute

SCRIPT = r'''#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
CHECKPOINT_PATH=${1:-"checkpoints/llama"}
GPUS_PER_NODE=8
NUM_NODES=1
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
TP=${TP:-2}       # tensor parallel
DTYPE="fp8"
NAME='a b'
LAYERS=32
LAYERS=40
HIDDEN=$LAYERS
ARGS=( --num-layers $LAYERS )
'''


def test_literal_assignments_in_order():
    v = shell_variables(SCRIPT)
    assert v["GPUS_PER_NODE"] == "8" and v["DTYPE"] == "fp8" and v["NAME"] == "a b"
    assert v["TP"] == "2"                       # the default: nothing in the environment
    assert v["LAYERS"] == "40"                  # the later assignment wins
    assert v["HIDDEN"] == "40"                  # a reference to a known variable
    assert v["CHECKPOINT_PATH"] == "checkpoints/llama"   # a positional parameter's default
    assert "WORLD_SIZE" not in v                # arithmetic needs the shell
    assert "ARGS" not in v                      # an array is not a scalar


def test_the_environment_fills_defaults_and_what_the_shell_would_compute():
    v = shell_variables(SCRIPT, {"TP": "4", "WORLD_SIZE": "16", "LAYERS": "2"})
    assert v["TP"] == "4"                       # ${TP:-2} takes the environment's
    assert v["WORLD_SIZE"] == "16"              # $((...)): the environment says it
    assert v["LAYERS"] == "40"                  # a plain assignment overrides it, as in bash


def test_substitute_keeps_unknown_references():
    v = {"A": "1", "B": "x"}
    assert substitute("--n $A --m ${B} --k $C --j ${D:-7} --i ${E:-$A}", v) == \
        "--n 1 --m x --k $C --j 7 --i ${E:-$A}"


@given(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True),
                       st.from_regex(r"[a-z0-9.]{1,8}", fullmatch=True), max_size=6))
def test_every_literal_assignment_is_read_back(values):
    text = "\n".join(f"{k}={v}" for k, v in values.items())
    assert shell_variables(text) == values
    for k, v in values.items():
        assert substitute(f"--x ${k} --y ${{{k}}}", values) == f"--x {v} --y {v}"


def test_a_quoted_list_of_flags_may_run_over_lines():
    """BigScience's and Megatron-DeepSpeed's scripts keep their flags in quoted variables,
    a flag per line (with or without backslashes); a reference nothing sets stays as written
    in such a list, and a commented-out line ends at its newline even after a backslash."""
    script = '''N=4
ARGS=" \\
    --num-layers $N \\
    --save $SCRATCH/ckpt \\
    "
PLAIN="--a 1
--b 2"
#    --commented-out \\
AFTER=7
ONE="$SCRATCH"
TP='2'   # don't change
PP=4
'''
    v = shell_variables(script)
    assert v["ARGS"].split() == ["--num-layers", "4", "--save", "$SCRATCH/ckpt"]
    assert v["PLAIN"].split() == ["--a", "1", "--b", "2"]
    assert v["AFTER"] == "7"        # not swallowed by the comment's backslash
    assert "ONE" not in v           # a single word needing an unknown variable: unknown
    assert (v["TP"], v["PP"]) == ("2", "4")   # a quote inside a comment opens nothing
