"""How a NeMo 2 run is named on the command line, for ``generator: nemo2`` (:mod:`.nemo2`):
the recipe factory as ``--factory`` takes it (``llama3_70b`` or a call such as
``"llama3_70b(performance_mode=True)"``), and the whole launch command as typed
(``nemo llm pretrain --factory NAME items... -y``)."""

from __future__ import annotations

import ast
from typing import Any

from ...errors import config_error
from .imported import shell_words
from .nemo2_recipes import FACTORY_PATHS, RECIPES, Recipe


def read_recipe(text: Any, source: str) -> tuple[str, Recipe, bool, dict[str, Any]]:
    """The recipe a ``--factory`` value names (``name`` or ``name(key=value, ...)``), whether
    it asks for performance mode, and the settings its other arguments give (by path)."""
    if not isinstance(text, str) or not text.strip():
        raise config_error(source, "recipe", "a NeMo 2 recipe: " + ", ".join(RECIPES), text)
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        call = None
    if isinstance(call, ast.Name):
        name, arguments = call.id, []
    elif isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args:
        name, arguments = call.func.id, call.keywords
    else:
        raise config_error(source, "recipe", "a recipe name or a call such as "
                           "llama3_70b(performance_mode=True)", text)
    recipe = RECIPES.get(name)
    if recipe is None:
        raise config_error(source, "recipe", "one of " + ", ".join(RECIPES), name)
    accepted = ("performance_mode", "num_nodes", "num_gpus_per_node", "name", "dir",
                *recipe.factory_arguments)
    performance, settings = False, {}
    for argument in arguments:
        label = f"recipe ({argument.arg or '**'})"
        if argument.arg not in accepted:
            raise config_error(source, label, f"a keyword of {name}'s pretrain_recipe: "
                               + ", ".join(accepted), ast.unparse(argument.value))
        value = _literal(argument.value)
        if argument.arg == "performance_mode":
            if not isinstance(value, bool):
                raise config_error(source, label, "True or False", ast.unparse(argument.value))
            performance = value
        elif argument.arg is not None and argument.arg in FACTORY_PATHS:
            # Nemotron's recipes take their layout as arguments
            if argument.arg == "precision":
                value = {"bf16-mixed": "bf16_mixed", "16-mixed": "fp16_mixed"}.get(value, value)
            settings[FACTORY_PATHS[argument.arg]] = value
    if performance and recipe.performance is None:
        raise config_error(source, "recipe (performance_mode)", f"False ({name}'s "
                           "pretrain_recipe has no performance mode)", True)
    return name, recipe, performance, settings


def _literal(node: ast.expr) -> Any:
    """A call argument's value, as NeMo-Run reads it (``true`` and ``none`` too)."""
    if isinstance(node, ast.Name) and node.id.lower() in ("true", "false", "none", "null"):
        return {"true": True, "false": False}.get(node.id.lower())
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


#: words of a launch command that neither name the recipe nor set the run
_LAUNCH_WORDS = ("nemo", "llm", "pretrain", "-y", "--yes", "--dryrun", "-d", "--detach",
                 "--tail-logs", "--repl")


def read_command(text: Any, source: str) -> tuple[str, list[str]]:
    """The recipe and the items of a launch command as typed (``nemo llm pretrain --factory
    llama3_70b trainer.num_nodes=4 ...``); NeMo-Run's own settings (``executor=...``,
    ``run.name=...``) are skipped."""
    if not isinstance(text, str):
        raise config_error(source, "command", "a launch command (nemo llm pretrain --factory "
                           "NAME items...)", text)
    words = shell_words(text, source, "command", "a launch command")
    recipe, items, i = None, [], 0
    while i < len(words):
        word = words[i]
        if word in ("--factory", "-f") and i + 1 < len(words):
            recipe, i = words[i + 1], i + 2
            continue
        if word.startswith("--factory="):
            recipe = word.partition("=")[2]
        elif "=" in word and not word.startswith("-"):
            if not word.startswith(("executor", "run.")):
                items.append(word)
        elif word not in _LAUNCH_WORDS:
            raise config_error(source, "command", "nemo llm pretrain --factory NAME followed "
                               "by NeMo-Run's items (a.b=value)", word)
        i += 1
    if recipe is None:
        raise config_error(source, "command", "a command with --factory NAME", text)
    return recipe, items
