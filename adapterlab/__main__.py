"""`python -m adapterlab` and the `adapterlab` script: the command line (:mod:`adapterlab.cli`).

Loading it imports torch, which takes seconds: a Ctrl-C meanwhile ends as it would in a command, with one line
and exit 130, not a traceback. The package itself imports nothing heavy, so the interrupt lands in :func:`run`."""

import sys


def run() -> int:
    """Load the command line and run it; the exit code (130 when a Ctrl-C stops the loading)."""
    try:
        from .cli import main
    except KeyboardInterrupt:
        print("adapterlab: interrupted while loading; nothing was done", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
