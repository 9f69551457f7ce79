"""Where LOs are referenced from: the forms a value names an LO in (``values``)."""
