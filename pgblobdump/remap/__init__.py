"""restore --remap: an archive's LOs at new OIDs in a database whose OIDs are taken,
and the references to them rewritten."""
