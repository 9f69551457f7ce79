"""The packed archive's commands: dump, restore, verify, ls/cat/merge (``browse``),
pack/unpack, and the options they share (``common``)."""
