"""Storage benchmarks from the seed articles: reads of the same bytes as a file, an LO and
bytea (``read``), and TOAST across the threshold (``toast``), on a durable server."""
