"""Start-up time of the command line: ``flowsim --help``, ``flowsim --version``,
``python -m flowsim --version`` and ``import flowsim``, against ``python -c pass`` in the same
run (whole processes, medians, interleaved so that machine load hits every command alike).

    python scripts/bench_cli.py              # 15 rounds
    python scripts/bench_cli.py --rounds 40

Prints each command's median wall time, its excess over ``python -c pass`` and the ratio; the
target of issue 16 is ``--help`` and ``--version`` under 0.3 s, that of issue 17 a small
collective run (``flowsim collective --json``, 64 MiB all-reduce on an 8-NPU ring) under
0.5 s. Also lists any heavy module
(numpy, scipy, xarray, pandas, numba, yaml) that ``--version`` imports (there should be none).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("numpy", "scipy", "xarray", "pandas", "numba", "yaml")
#: The ``--help`` / ``--version`` target of issue 16, seconds of wall time.
TARGET_S = 0.3
#: The small run of issue 17 (one process per point, as a shell loop over configs runs it):
#: a 64 MiB all-reduce on the bundled 8-NPU ring, and its target (whole process, seconds).
SMALL_RUN = "flowsim collective --json"
SMALL_RUN_TARGET_S = 0.5
#: Commands run from here: ``python -c`` and ``-m`` put the current folder first on
#: ``sys.path``, so running them from a source tree would time that tree, not the flowsim
#: that ``PYTHONPATH`` or the installation gives (as the console script does).
NEUTRAL = tempfile.gettempdir()


def commands() -> dict[str, list[str]]:
    """The timed commands (the console script of this Python's environment, else the one on
    PATH)."""
    py = sys.executable
    out = {"python -c pass": [py, "-c", "pass"],
           "import flowsim": [py, "-c", "import flowsim"],
           "python -m flowsim --version": [py, "-m", "flowsim", "--version"],
           "python -m flowsim --help": [py, "-m", "flowsim", "--help"]}
    beside = Path(sys.executable).with_name("flowsim")  # this environment's console script
    script = str(beside) if beside.is_file() else shutil.which("flowsim")
    if script:
        out["flowsim --version"] = [script, "--version"]
        out["flowsim --help"] = [script, "--help"]
        out[SMALL_RUN] = [script, "collective", "--json", "--network", "ring8",
                          "--collective", "all_reduce", "--size", "64MiB"]
        out["flowsim run"] = [script, "run"]   # the README's first command
    return out


def time_once(argv: list[str]) -> float:
    """Wall seconds of one whole process (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   cwd=NEUTRAL)
    return time.perf_counter() - start


def heavy_imports() -> list[str]:
    """Heavy modules loaded by the ``--version`` code path."""
    code = ("import sys\nfrom flowsim.cli import main\ntry:\n    main(['--version'])\n"
            "except SystemExit:\n    pass\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=NEUTRAL)
    lines = done.stdout.splitlines()  # the version line, then the heavy modules
    return lines[-1].split() if len(lines) > 1 else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--rounds", type=int, default=15,
                        help="runs of every command (default: %(default)s)")
    args = parser.parse_args(argv)
    cmds = commands()
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for name, cmd in list(cmds.items()):  # one untimed run each: file cache, .pyc files
        try:
            time_once(cmd)
        except subprocess.CalledProcessError:
            print(f"{name}: fails (not timed)")
            del cmds[name], times[name]
    for _ in range(args.rounds):
        for name, cmd in cmds.items():
            times[name].append(time_once(cmd))
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<30} {'median s':>9} {'- pass s':>9} {'ratio':>6}")
    for name, values in times.items():
        med = statistics.median(values)
        verdict = ""
        target = SMALL_RUN_TARGET_S if name == SMALL_RUN else \
            TARGET_S if ("--help" in name or "--version" in name) else None
        if target is not None:
            verdict = "  met" if med < target else f"  MISSED (target < {target} s)"
        print(f"{name:<30} {med:9.3f} {med - base:9.3f} {med / base:6.2f}{verdict}")
    heavy = heavy_imports()
    print("heavy modules imported by --version: " + (", ".join(heavy) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
