"""An instant command line and a light ``import flowsim``: ``--help`` and ``--version`` load
no numpy, scipy, xarray, pandas or Numba; the package's public names load on first use and
keep working; ``python -m flowsim`` is the ``flowsim`` command; every script answers
``--help`` without running anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import flowsim
from conftest import loaded_after
from flowsim import cli_args

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "xarray", "pandas", "numba", "yaml")
SCRIPTS = sorted(p for p in (ROOT / "scripts").rglob("*.py") if not p.name.startswith("_"))


def _loaded_after(code: str) -> set[str]:
    """Heavy modules in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    return loaded_after(code, HEAVY)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["run", "--help"],
                                  ["collective", "--help"], ["sweep", "--help"]])
def test_help_and_version_import_nothing_heavy(argv):
    code = ("from flowsim.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    assert _loaded_after(code) == set()


def test_import_flowsim_is_light():
    assert _loaded_after("import flowsim") == set()


def test_a_small_collective_run_loads_only_numpy_and_yaml():
    # a shell loop's point: no xarray / pandas (the record, not a Dataset), no scipy / Numba
    # (no fabric; the small step's loads are vectorized), no dask (xarray's chunk managers)
    code = ("import sys\nfrom flowsim.cli import main\n"
            "main(['collective', '--json', '--network', 'ring8', '--size', '64MiB'])\n"
            "assert 'dask' not in sys.modules")
    assert _loaded_after(code) == {"numpy", "yaml"}


def test_the_default_run_loads_only_numpy_and_yaml():
    # `flowsim run` prints its summary from the run's record: no xarray, and the analytical
    # model of a multi-dimensional network loads neither scipy nor Numba
    code = "from flowsim.cli import main\nmain(['run'])"
    assert _loaded_after(code) == {"numpy", "yaml"}


def test_a_function_keeps_its_name_when_its_homonymous_submodule_loads():
    _passes("import flowsim.system.simulate, flowsim.sweep, flowsim.estimate\n"
            "import flowsim, flowsim.system\n"
            "assert callable(flowsim.simulate) and callable(flowsim.system.simulate)\n"
            "assert callable(flowsim.sweep) and callable(flowsim.estimate)\n")


@pytest.mark.parametrize("package", ["topology", "network", "system", "results"])
def test_every_subpackage_name_loads_on_first_use(package):
    code = (f"import importlib\npkg = importlib.import_module('flowsim.{package}')\n"
            "for name in pkg.__all__:\n"
            "    value = getattr(pkg, name)\n"
            "    home = getattr(value, '__module__', None)\n"
            "    assert home is None or home.startswith(pkg.__name__), (name, home)\n"
            "assert set(pkg.__all__) <= set(dir(pkg))\n"
            "try:\n    pkg.nope\nexcept AttributeError as e:\n    assert 'nope' in str(e)\n"
            "else:\n    raise AssertionError('pkg.nope')\n")
    _passes(code)


def _passes(code: str) -> None:
    """``code`` runs to the end in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_public_name_loads_on_first_use():
    code = ("import flowsim\n"
            "missing = [n for n in flowsim.__all__ if getattr(flowsim, n, None) is None]\n"
            "assert not missing, missing\n"
            "from flowsim import *  # noqa\n"
            "assert callable(flowsim.sweep) and callable(flowsim.estimate)\n"
            "import flowsim.sweep.run, flowsim.estimate  # the submodules keep their names\n"
            "assert callable(flowsim.sweep) and callable(flowsim.estimate)\n"
            "assert callable(flowsim.results.from_attrs)\n")
    _passes(code)


def test_public_names_are_the_defining_modules_objects():
    from flowsim.system import simulate
    from flowsim.topology import load_network

    assert flowsim.simulate is simulate and flowsim.load_network is load_network
    assert set(flowsim.__all__) <= set(dir(flowsim))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        flowsim.nope  # noqa: B018


def test_python_dash_m_flowsim_is_the_command():
    done = subprocess.run([sys.executable, "-m", "flowsim", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == f"flowsim {flowsim.__version__}"


@pytest.mark.parametrize("command", ["run", "collective"])
def test_subcommand_help_lists_bundled_configs_and_defaults(capsys, command):
    from flowsim.resources import bundled_names

    with pytest.raises(SystemExit):
        flowsim.cli.main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name in bundled_names("network") + bundled_names("system"):
        assert name in out
    parser = cli_args.build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    formatter = sub._get_formatter()
    for action in sub._actions:
        if action.option_strings and action.default is not None and action.default is not False \
                and action.default != [] and action.default != "==SUPPRESS==":
            assert "default" in formatter._get_help_string(action), action.dest


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_answers_help(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout[:200]
