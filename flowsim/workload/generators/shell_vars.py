r"""A launch script's shell variables, as far as reading the script can tell them.

Launch scripts (Megatron-LM's ``examples/``, cluster recipes) set their sizes once
(``NUM_LAYERS=32``, ``TP=${TP:-1}``) and pass them as ``--num-layers $NUM_LAYERS``. This module
reads the assignments a script makes with literal values, in order, the way bash would run
them from top to bottom, and substitutes ``$NAME`` and ``${NAME}`` in the script's words:

* ``NAME=value`` and ``export NAME=value`` (quoted or not) set ``NAME``; a later assignment
  wins;
* ``${NAME:-default}`` (and ``${NAME:=default}``) is the environment's value when ``env``
  gives one, else ``default``; positional parameters (``${1:-x}``) take their default;
* a quoted value may run over several lines (``GPT_ARGS=" \`` and a flag per line, as
  BigScience's and Megatron-DeepSpeed's scripts write them); in a quoted list of words a
  reference nothing sets stays as written, so the other words are still read;
* a value that needs the shell to run (command substitution ``$(...)``, arithmetic
  ``$((...))``, backquotes) leaves the variable unknown unless ``env`` gives it, and so does
  a single word referring to a variable nothing sets.

Nothing is executed and conditionals are not evaluated: an ``if`` adds its lines' flags like
any others. Unknown variables stay as written, so the flag that needs one names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: ``[export] NAME=value`` at the start of a line
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
#: ``${NAME}``, ``${NAME:-default}``, ``${NAME:=default}`` or ``$NAME`` (``NAME`` may be a
#: positional parameter's digits)
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::[-=]([^}]*))?\}"
                        r"|\$([A-Za-z_][A-Za-z0-9_]*)")
#: what only running the shell can tell
_NEEDS_SHELL = ("$(", "`")


def shell_variables(text: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``text`` sets with literal values, after its last assignment of each;
    ``env`` is the environment the script would run in."""
    known: dict[str, str] = dict(env or {})
    environment = set(known)
    for name, raw in _assignments(text):
        value = _literal(raw, known, environment)
        if value is None:
            if env is None or name not in env:   # what the shell would compute is unknown
                known.pop(name, None)            # (``env`` may say it)
        else:
            known[name] = value
            environment.discard(name)   # the script's own assignment wins from here on
    return known


def joined_lines(text: str) -> str:
    """``text`` with its comment lines dropped and its backslash-newlines joined. Bash would
    end the command at a commented-out line (even one ending in a backslash) and run the
    lines after it apart; launch scripts comment out a flag line that way meaning to drop
    only that flag, which is how this reads it."""
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return ("\n".join(kept) + "\n").replace("\\\n", " ")


def _assignments(text: str) -> list[tuple[str, str]]:
    """``(name, raw value)`` of every assignment line, in order; a quoted value left open
    at its line's end runs on to the line that closes it (backslash-newlines joined)."""
    lines = joined_lines(text).splitlines()
    out = []
    i = 0
    while i < len(lines):
        match = _ASSIGNMENT.match(lines[i])
        i += 1
        if match is None:
            continue
        name, raw = match.groups()
        while _left_open(raw) and i < len(lines):
            raw += " " + lines[i]
            i += 1
        out.append((name, raw))
    return out


def _left_open(raw: str) -> bool:
    """Whether ``raw`` ends inside a quote (a ``#`` outside quotes starts a comment)."""
    return _code(raw)[1] is not None


def substitute(word: str, variables: Mapping[str, str]) -> str:
    """``word`` with the references to known variables replaced (the others kept)."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        default = match.group(2)
        if match.group(1) is not None and default is not None and "$" not in default:
            return default
        return match.group(0)

    return _REFERENCE.sub(one, word)


def _literal(raw: str, known: Mapping[str, str], environment: set[str]) -> str | None:
    """The value of an assignment's right-hand side, or None if the shell must run it."""
    raw = _strip_comment(raw.strip())
    if any(marker in raw for marker in _NEEDS_SHELL):
        return None
    words = False
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        if raw[0] == "'":
            return raw[1:-1]
        raw = raw[1:-1]
        words = len(raw.split()) > 1
    elif raw.startswith("(") or " " in raw:   # a bash array or a command prefix
        return None

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        if match.group(1) is not None and default is not None:
            if name in environment:
                return known[name]
            return _unquote(default)
        if name in known:
            return known[name]
        if words:   # one word of several: the others are still worth reading
            return match.group(0)
        raise KeyError(name)

    try:
        return _REFERENCE.sub(one, raw)
    except KeyError:
        return None


def _strip_comment(raw: str) -> str:
    """``value   # comment`` -> ``value`` (a ``#`` inside quotes or a word stays)."""
    code, _ = _code(raw)
    return code.rstrip() if len(code) < len(raw) else raw


def _code(raw: str) -> tuple[str, str | None]:
    """``raw`` up to its comment, and the quote it ends inside (None: none)."""
    quote = None
    for i, char in enumerate(raw):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or raw[i - 1].isspace()):
            return raw[:i], None
    return raw, quote


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
