"""Restoring LOs into a database: the request, the one entry by archive name, the
lock-budgeted batches, the precheck and journal for ``--resume``, ``--jobs N`` over N
connections, and ``--full`` around pg_restore's sections."""
