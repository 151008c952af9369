"""The documentation: the site builds with warnings as errors, its references are generated from
the code and cover it, every figure has a script, and the README's commands stay as CI runs
them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import flowsim
from flowsim.cli_args import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_hooks"))

import cli_reference  # noqa: E402  (the MkDocs hook, from docs/_hooks)
import sphinx_roles  # noqa: E402

FIRST = ('pip install -e . && flowsim run                    # install, simulate a ResNet-50 '
         'training step on the bundled 8-NPU ring')
SECOND_COMMAND = 'pip install -e ".[dev]" && pytest'


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_the_cli_reference_holds_every_option_of_every_subcommand():
    text = cli_reference.cli_reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, subparser in sub.choices.items():  # type: ignore[union-attr]
        assert f"`flowsim {name}`" in text
        for action in subparser._actions:
            if action.help == "==SUPPRESS==":   # hidden (e.g. refused ASTRA-sim flags)
                continue
            for option in action.option_strings:
                assert f"`{option}" in text, (name, option)


def test_the_api_reference_covers_every_public_name():
    page = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^::: flowsim\.(?:[\w.]+\.)?(\w+)$", page, re.M))
    assert set(flowsim.__all__) - {"__version__"} <= documented


@pytest.mark.parametrize("text, expected", [
    (":func:`load_network`", "`load_network`"),
    (":class:`~flowsim.workload.roofline.Roofline`", "`Roofline`"),
    ("see :py:meth:`Network.routes` and :data:`MODELS`", "see `Network.routes` and `MODELS`"),
])
def test_sphinx_roles_read_as_code(text, expected):
    assert sphinx_roles.plain_roles(text) == expected


def _images() -> set[str]:
    """Images shown by the pages, as paths relative to ``docs/``."""
    found = set()
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            found.add((page.parent / target).resolve().relative_to(DOCS).as_posix())
    return found


def test_every_figure_is_drawn_by_a_listed_script():
    figures = (DOCS / "figures.md").read_text()
    rows = [line for line in figures.splitlines() if line.startswith("| `docs/")]
    for image in _images():
        stem = Path(image).name
        row = next((r for r in rows if stem in r), None)
        assert row is not None, f"{image} is not listed in docs/figures.md"
        scripts = re.findall(r"python (scripts/\S+\.py)", row)
        assert scripts and all((ROOT / s).is_file() for s in scripts), row
        assert (DOCS / image).is_file(), image


def test_the_readme_keeps_its_two_commands_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0] == FIRST
    assert block[1].startswith(SECOND_COMMAND + " ")
    assert SECOND_COMMAND in (ROOT / ".ci" / "run").read_text()
    assert len(readme.splitlines()) <= 220
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        name = page.relative_to(DOCS).as_posix()
        assert f": {name}" in nav or f"- {name}" in nav, f"{name} is not in mkdocs.yml's nav"


def test_getting_started_s_own_run_prints_what_the_page_says(tmp_path):
    """The Megatron-LM arguments of "Your own training run" on the DGX H100 preset (given no
    system: NCCL's settings), and the same with Torch FSDP2: the memory and the two step
    times the page states (it once quoted ASTRA-sim's default system's, since gone stale)."""
    page = (DOCS / "getting-started.md").read_text()
    section = page[page.index("## Your own training run"):page.index("## Bundled configs")]
    spec = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "run.yml").write_text(spec)
    (tmp_path / "fsdp.yml").write_text(spec.replace(
        "--use-distributed-optimizer --overlap-grad-reduce", "--use-torch-fsdp2"))
    run, fsdp = (flowsim.simulate("dgx_h100", str(tmp_path / f"{name}.yml"))
                 for name in ("run", "fsdp"))
    assert f"{float(fsdp.time_ns) / 1e6:.0f} ms instead of {float(run.time_ns) / 1e6:.0f}" \
        in section
    assert f"here\n{run.attrs['memory_gib']:.1f} of the H100's 80 GiB" in section
    assert f"{fsdp.attrs['memory_gib']:.1f} GiB" in section


@pytest.mark.parametrize("section", ["### From a NeMo 2 recipe", "### From an LLM Foundry YAML",
                                     "### From a torchtitan job config",
                                     "### Hybrid models: Mamba-2 layers"])
def test_the_importers_runs_print_what_the_workloads_page_says(section, tmp_path):
    """Each importer section of the Training workloads page whose files are all on the page
    (each fenced block that opens with ``# <file name>``): its ``flowsim run`` line's step
    time and memory are what the run gives."""
    page = (DOCS / "guide" / "workloads.md").read_text()
    text = page[page.index(section):]
    text = text[:text.index("\n### ", 1)]
    for block in text.split("```")[1::2]:
        lang, _, body = block.partition("\n")
        if lang in ("yaml", "toml") and body.startswith("# "):
            name = body.split("\n", 1)[0][2:].split(":")[0].strip()
            (tmp_path / name).write_text(body)
    line = re.search(r"flowsim run --workload (\S+) --network (\S+) +# ([\d.]+) s per step.*?"
                     r"([\d.]+) GiB per GPU", text)
    assert line, section
    workload, network, seconds, gib = line.groups()
    ds = flowsim.simulate(str(tmp_path / network), str(tmp_path / workload))
    decimals = len(seconds.split(".")[1])
    assert f"{float(ds.time_ns) / 1e9:.{decimals}f}" == seconds
    assert f"{ds.attrs['memory_gib']:.1f}" == gib
    # the same run with one key changed, as the prose quotes it
    for seconds, key, value in re.findall(r"([\d.]+) s with `--set workload\.(\w+)=(\w+)`",
                                          " ".join(text.split())):
        spec = dict(yaml.safe_load((tmp_path / workload).read_text()), **{key: value})
        spec["config"] = str(tmp_path / spec["config"])
        ds = flowsim.simulate(str(tmp_path / network), spec)
        assert f"{float(ds.time_ns) / 1e9:.{len(seconds.split('.')[1])}f}" == seconds, key
