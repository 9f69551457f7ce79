"""PostgreSQL binaries and the servers we start: toolchains, embedded clusters, the user
a server runs as, ``doctor``; and SeaweedFS (``seaweed``), which only tests and benchmarks
start (nothing of the runtime imports it)."""
