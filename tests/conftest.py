"""Shared fixtures: small networks and the path to ASTRA-sim's reference data."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import flowsim

REPO = Path(__file__).resolve().parent.parent
#: ASTRA-sim reference runs live beside the repository (``../shared/validation``) unless
#: FLOWSIM_VALIDATION points elsewhere.
VALIDATION = Path(os.environ.get("FLOWSIM_VALIDATION",
                                 REPO.parent / "shared" / "validation"))


def loaded_after(code: str, modules: tuple[str, ...]) -> set[str]:
    """Which of ``modules`` are in ``sys.modules`` after running ``code`` in a fresh
    interpreter (in the repository's folder); the code must succeed."""
    probe = (f"import sys\n{code}\n"
             f"print(' '.join(m for m in {modules!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    return set(lines[-1].split()) if lines else set()


def ring(p: int = 8, bw: float = 50.0, lat: float = 500.0) -> dict:
    return {"topology": ["Ring"], "npus_count": [p], "bandwidth": [bw], "latency": [lat]}


def block(name: str, p: int = 8, bw: float = 50.0, lat: float = 500.0) -> dict:
    return {"topology": [name], "npus_count": [p], "bandwidth": [bw], "latency": [lat]}


#: a system with no endpoint delay and free reductions: closed forms are pure network time
PURE = {"preferred-dataset-splits": 1, "endpoint-delay": 0, "active-chunks-per-dimension": 1,
        "collective-optimization": "localBWAware"}


def pure(**overrides) -> dict:
    out = dict(PURE)
    out.update(overrides)
    return out


def iteration_times(net, *specs) -> list[float]:
    """Simulated iteration times (ns) of workload ``specs`` on ``net``, with the importers'
    warnings (unmodelled flags, no vocabulary) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        return [float(flowsim.simulate(net, spec).time_ns) for spec in specs]


@pytest.fixture(scope="session")
def astra_cases() -> Path:
    path = VALIDATION / "astra_sim" / "cases.csv"
    if not path.is_file():
        pytest.skip(f"ASTRA-sim reference data not found at {path} "
                    f"(set FLOWSIM_VALIDATION to the shared/validation folder)")
    return path


@pytest.fixture
def net8():
    return flowsim.load_network(ring())


def ancestors(program, op) -> set[int]:
    """Ids of every op ``op`` of ``program`` waits for through data dependencies."""
    by_id = {o.id: o for o in program.ops}
    seen: set[int] = set()
    todo = list(op.deps)
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(by_id[d].deps)
    return seen


def assert_spec_refused(spec: dict, key: str) -> None:
    """A transformer spec is refused in one line naming ``key`` and what it expects."""
    from flowsim.errors import ConfigError
    from flowsim.workload.generators.transformer_parse import parse_transformer

    with pytest.raises(ConfigError, match=rf"'{key}': expected"):
        parse_transformer(spec, "argument")


def same_records(a, b) -> list[str]:
    """Fields in which two :class:`~flowsim.results.workload.RunRecord` differ (arrays to
    the bit)."""
    import dataclasses

    import numpy as np

    differ = []
    for f in dataclasses.fields(b):
        if f.name == "timeline":   # only the Python engine keeps one
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(y, np.ndarray):
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                differ.append(f.name)
        elif x != y:
            differ.append(f.name)
    return differ


@pytest.fixture(autouse=True)
def _compare_event_loops(monkeypatch):
    """With FLOWSIM_COMPARE_LOOPS=1, every analytical training run in the suite runs in both
    the compiled loop and the Python engine, and the records must agree to the bit."""
    if not os.environ.get("FLOWSIM_COMPARE_LOOPS"):
        yield
        return
    import importlib

    module = importlib.import_module("flowsim.system.simulate")
    original = module.run_workload

    def both(net, work, system, model, *, compiled=True, **options):
        if not compiled:   # a test choosing the engine itself
            return original(net, work, system, model, compiled=False, **options)
        python = original(net, work, system, model, compiled=False, **options)
        if model != "analytical":
            return python
        from flowsim.system.analytical_loop import run_compiled

        compiled = run_compiled(net, work, system, **options)   # None: not taken
        if compiled is None:
            return python
        differ = same_records(compiled, python)
        assert not differ, f"compiled and Python loops differ in {differ}"
        return compiled

    monkeypatch.setattr(module, "run_workload", both)
    yield


def page_table(heading: str, header: str) -> list[list[str]]:
    """The cells of the table in the accuracy page's section ``heading`` (its own header row
    starts with ``| header``), each row's cells stripped."""
    page = (REPO / "docs" / "accuracy" / "published.md").read_text()
    start = page.index(f"## {heading}")
    section = page[start: page.index("\n## ", start)]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(f"| {header}")]


def recorded_cells(recorded: dict[str, str]) -> list[str]:
    """A record row's published step and error as the accuracy page's tables print them."""
    error = f"{100 * float(recorded['error']):+.1f}%".replace("-", "\u2212")
    return [f"{float(recorded['published_s']):.3f}", error]


def published_record() -> dict[str, dict[str, str]]:
    """The published-run record (``validation/published/results.csv``) by run."""
    import csv

    with (REPO / "validation" / "published" / "results.csv").open(newline="") as handle:
        return {r["run"]: r for r in csv.DictReader(handle)}

