"""Incremental archives: ``dump --since`` and its checksum fallback, a chain of
archives read as one, and ``merge`` folding a chain into one standalone archive."""
