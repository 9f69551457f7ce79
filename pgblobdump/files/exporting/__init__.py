"""``export``: one file or object per LO, named from a template and the rows that
reference it, a manifest last (docs/out-and-back.md)."""
