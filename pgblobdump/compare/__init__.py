"""Measure pg_dump/pg_restore of many large objects across majors, formats and counts."""
