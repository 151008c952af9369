"""Names of a package imported on first use (PEP 562).

A one-process-per-point shell loop pays every import on every point, so a package's
``__init__`` names its public objects here instead of importing them: ``flowsim.topology``
then costs nothing until a run asks for, say, a fabric (scipy, Numba) or a Dataset (xarray).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str], namespace: dict[str, Any],
               submodules: Iterable[str] = ()
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package with lazy names.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : mapping of str to str
        Public name -> the relative module that defines it (``".load"``).
    namespace : dict
        The package's ``globals()``: a name, once imported, is kept there, so the next access
        is a plain attribute lookup.
    submodules : iterable of str
        Submodules reachable as attributes (``flowsim.results`` after ``import flowsim``).
    """
    subs = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
        elif name in subs:
            value = importlib.import_module("." + name, package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names) | subs)

    return __getattr__, __dir__


def keep_functions_over_submodules(package: str, names: Iterable[str]) -> None:
    """Keep the public functions ``names`` of ``package`` when their homonymous submodules
    load.

    Importing ``flowsim.system.simulate`` makes the import system set the package's attribute
    ``simulate`` to the submodule; the public name must stay the function (``flowsim.sweep``
    and ``flowsim.estimate`` likewise). The package's module type ignores that assignment.
    """
    shadowed = frozenset(names)

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in shadowed and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[package].__class__ = _Package
