"""The rest of the database beside the LOs: pg_dump into and pg_restore out of a
``--full`` archive, ``pack`` and ``unpack`` between pg_dump's archives and ours."""
