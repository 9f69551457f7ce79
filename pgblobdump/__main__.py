"""The program's entry point: ``python -m pgblobdump`` and the ``pgblobdump`` script."""


def run() -> None:
    """Defer SIGINT, SIGTERM and SIGHUP before click and the rest of the program load, so
    a Ctrl-C during start-up is acted on (exit 130, nothing left) rather than raised in
    the middle of an import (a traceback, and the process killed by the signal)."""
    from pgblobdump import signals

    signals.defer()
    from pgblobdump.cli import main

    main()


if __name__ == "__main__":
    run()
