"""The package's architecture holds: every module imports on its own, imports go one way down
the layers, no import cycles, small modules.

Layers, lowest first (a module may import its own layer or lower ones only)::

    base          errors, units, _version (+ the generated _scm_version), _arrays, _validate,
                  _io, _atomic, _lazy, _gc_pause, _weak, resources, device_names
    topology      flowsim.topology.*
    network       flowsim.network.*
    descriptions  flowsim.collectives.*, flowsim.workload.*
    compute       flowsim.compute.* (prices the workload's kernels on a device)
    results       flowsim.results.* (Datasets, files and traces built from the engine's arrays)
    system        flowsim.system.*
    top           estimate, sweep.*, cli, cli_args, cli_astra, cli_set, __main__, testing, _warmup,
                  flowsim itself

The import graph is read from the source with ``ast`` (every ``import`` statement, including
those inside functions), so a lazy import cannot hide a wrong direction or a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import flowsim

PACKAGE = Path(flowsim.__file__).resolve().parent
ROOT = PACKAGE.parent

LAYERS = [
    ("base", {"flowsim.errors", "flowsim.units", "flowsim._version", "flowsim._scm_version",
              "flowsim._arrays", "flowsim._validate", "flowsim._io", "flowsim._atomic",
              "flowsim._lazy", "flowsim._gc_pause", "flowsim._weak", "flowsim.resources",
              "flowsim.device_names"}),
    ("topology", {"flowsim.topology"}),
    ("network", {"flowsim.network"}),
    ("descriptions", {"flowsim.collectives", "flowsim.workload"}),
    ("compute", {"flowsim.compute"}),
    ("results", {"flowsim.results"}),
    ("system", {"flowsim.system"}),
    ("top", {"flowsim.estimate", "flowsim.sweep", "flowsim.cli", "flowsim.cli_args",
             "flowsim.cli_astra", "flowsim.cli_set", "flowsim.__main__",
             "flowsim.testing", "flowsim._warmup", "flowsim"}),
]

#: Imports against the layer order that exist today (none: keep it that way; the test fails on
#: entries that no longer occur).
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str]] = set()
#: Import cycles that exist today (none).
KNOWN_CYCLES: list[set[str]] = []

#: Modules over :data:`MAX_LINES` lines today (count in the comment). Delete an entry once it
#: is split; the test fails on entries that are no longer long.
LONG_MODULES: set[str] = set()
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()
#: Modules written at install time (setuptools-scm's version file), absent from a fresh
#: checkout: imports of them resolve to them, not to the package.
GENERATED = {"flowsim._scm_version"}


def _imports(name: str, path: Path) -> set[str]:
    """Modules of the package that ``name`` imports (anywhere in its source)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import sub` imports the submodule pkg.sub when there is one
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES.keys() | GENERATED:  # import flowsim.x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    for rank, (_, members) in enumerate(LAYERS):
        if any(module == m or (module.startswith(m + ".") and m != "flowsim")
               for m in members):
            return rank
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def test_imports_go_down_the_layers():
    wrong = {(a, b) for a, targets in GRAPH.items() for b in targets
             if _layer(b) > _layer(a)}
    unexpected = sorted(wrong - KNOWN_LAYER_VIOLATIONS)
    assert not unexpected, "imports of a higher layer: " + ", ".join(
        f"{a} -> {b}" for a, b in unexpected)
    stale = sorted(KNOWN_LAYER_VIOLATIONS - wrong)
    assert not stale, f"fixed: delete from KNOWN_LAYER_VIOLATIONS: {stale}"


def test_no_import_cycles():
    cycles = _strongly_connected(GRAPH)
    unexpected = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not unexpected, "import cycles: " + "; ".join(" <-> ".join(sorted(c))
                                                        for c in unexpected)
    stale = [c for c in KNOWN_CYCLES if c not in cycles]
    assert not stale, f"fixed: delete from KNOWN_CYCLES: {stale}"


def test_modules_are_small():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
               for p in MODULES.values()}
    long = {name for name, n in lengths.items() if n > MAX_LINES}
    assert long <= LONG_MODULES, f"over {MAX_LINES} lines: {sorted(long - LONG_MODULES)}"
    stale = sorted(LONG_MODULES - long)
    assert not stale, f"now short: delete from LONG_MODULES: {stale}"


def test_jitted_code_lives_in_private_kernel_modules():
    """Numba is imported only by private modules (``_kernels.py`` and its kin): the public
    API around them validates, the kernels take plain arrays (docs/ARCHITECTURE.md)."""
    jitted = {name for name, path in MODULES.items()
              if any(isinstance(node, (ast.Import, ast.ImportFrom)) and
                     any((alias.name if isinstance(node, ast.Import) else node.module or "")
                         .split(".")[0] == "numba" for alias in node.names)
                     for node in ast.walk(ast.parse(path.read_text())))}
    assert jitted, "no module imports numba: the test reads imports wrongly"
    public = sorted(name for name in jitted if not name.rsplit(".", 1)[-1].startswith("_"))
    assert not public, f"numba imported by public modules: {public}"


def test_every_module_imports_alone():
    """Each module in a fresh interpreter, so that no import order hides a cycle or a missing
    import (one subprocess runs them all, each in a clean ``sys.modules``)."""
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for mod in [m for m in sys.modules if m == 'flowsim' or m.startswith('flowsim.')]:\n"
        "        del sys.modules[mod]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n")
    result = subprocess.run([sys.executable, "-c", script, *sorted(MODULES)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


@pytest.mark.parametrize("graph, cycles", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, cycles):
    assert _strongly_connected(graph) == cycles
