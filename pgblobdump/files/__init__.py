"""LOs as files and objects: ``export`` (one file or object per LO, named from your rows),
``import`` (files become LOs), and the place both work in (``objects``: a directory or
an S3 prefix holding many named objects)."""
