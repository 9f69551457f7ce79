"""PostgreSQL plumbing: binaries per major version, embedded clusters, connections."""
