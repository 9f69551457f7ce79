"""Native reader of pg_dump custom and directory archives (no server, no pg_restore)."""
