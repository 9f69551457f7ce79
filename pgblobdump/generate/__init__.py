"""Create many large objects fast, with sizes, content, owners, ACLs, comments and a table.

The names below are loaded on first use: ``generate --help`` takes its choices from
``generate.spec`` without loading libpq."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgblobdump.generate.generator import GenerateResult, generate
    from pgblobdump.generate.spec import Content, GenerateSpec, SizeDist, SizeSpec

_HOME = {
    "Content": "spec",
    "GenerateResult": "generator",
    "GenerateSpec": "spec",
    "SizeDist": "spec",
    "SizeSpec": "spec",
    "generate": "generator",
}
"""Each name the package offers and its module."""

__all__ = ["Content", "GenerateResult", "GenerateSpec", "SizeDist", "SizeSpec", "generate"]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:  # a module of the package not imported yet: the import system's turn
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
