"""MkDocs hook: the command-line reference, generated from flowsim's argument parser.

A page that holds the marker ``<!-- flowsim-cli-reference -->`` gets, in its place, every
subcommand of :func:`flowsim.cli_args.build_parser`: its usage line, its description and a
table of its arguments with their help text and defaults (exactly what ``--help`` prints), so
the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- flowsim-cli-reference -->"
ROOT = Path(__file__).resolve().parents[2]


def _parser() -> argparse.ArgumentParser:
    if str(ROOT) not in sys.path:  # document this checkout, not another installed copy
        sys.path.insert(0, str(ROOT))
    from flowsim.cli_args import build_parser

    return build_parser()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        value = " " + (action.metavar if isinstance(action.metavar, str)
                       else "{" + ",".join(action.choices) + "}" if action.choices
                       else action.dest.upper())
    return ", ".join(f"`{name}{value}`" for name in action.option_strings)


def _section(name: str, parser: argparse.ArgumentParser, level: str) -> list[str]:
    formatter = parser._get_formatter()
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines = [f"{level} `{name}`", "", "```text", usage, "```", ""]
    if parser.description:
        lines += [parser.description, ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {_names(action)} | {_cell(text)} |")
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return lines


def cli_reference() -> str:
    """The Markdown reference of ``flowsim`` and each of its subcommands."""
    parser = _parser()
    lines = _section("flowsim", parser, "##")
    sub: Any = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in sub.choices.items():
        lines += _section(f"flowsim {name}", subparser, "##")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: replace the marker with the generated reference."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    return markdown
