"""The output formats every listing offers."""

from __future__ import annotations

import enum


class Format(enum.StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"
