"""Names a package offers, loaded from their modules on first use (PEP 562).

A package's ``__init__`` that imported every module it re-exports would load them all
(and libpq) whenever one light module of it is imported for a default or a choice."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``homes`` (name -> module of
    the package) is imported from its module then kept in the package; any other name is
    an AttributeError (a module not imported yet: the import system's turn)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
