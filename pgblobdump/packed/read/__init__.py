"""Reading an archive: opening what a user names (a directory, a stream file, ``-``),
its frames front to back or its LOs by OID through the index, and its LOs cut into
shares by OID range."""
