"""Allow ``python -m pgblobdump``."""

from pgblobdump.cli import main

main()
