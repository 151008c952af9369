"""The README's test command also lints and type-checks: ruff on the code, tests, scripts and
the documentation hooks; mypy on the package (settings in setup.cfg, ``[mypy]``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "flowsim", "tests", "scripts", "docs/_hooks", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_finds_nothing():
    done = _run("mypy", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout
