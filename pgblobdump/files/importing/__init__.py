"""``import``: every file under a directory or S3 prefix becomes an LO, streamed, over N
connections, verified, resumable (docs/import.md)."""
