"""``dump``: LOs from a database into an archive under one snapshot, by N workers,
with the ``--referenced-by`` columns that choose them."""
