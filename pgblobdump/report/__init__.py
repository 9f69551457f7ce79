"""Results and reports shared by every command: tabular data rendered as JSON, CSV, Markdown."""

from pgblobdump.report.table import Column, Table, to_csv, to_json, to_markdown

__all__ = ["Column", "Table", "to_csv", "to_json", "to_markdown"]
