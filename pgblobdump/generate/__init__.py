"""Create many large objects fast, with sizes, content, owners, ACLs, comments and a table.

The names below are loaded on first use: ``generate --help`` takes its choices from
``generate.spec`` without loading libpq."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgblobdump import lazy

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


__getattr__ = lazy.exports(__name__, _HOME)
