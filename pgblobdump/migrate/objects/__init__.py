"""``migrate run --to s3://bucket/prefix`` and back (``--to lo`` of a column of keys): the
objects written (or read) before the column's switch, verified, and who could read them.
The column's own move (new column, triggers, batches, switch, finish) is migrate's."""
