"""`python -m adapterlab`: the command line (:mod:`adapterlab.cli`).

Loading it imports torch, which takes seconds: a Ctrl-C meanwhile ends here as it would in a command, with one
line and exit 130, not a traceback. (The package itself imports nothing heavy, so the interrupt lands here.)"""

import sys

try:
    from .cli import main
except KeyboardInterrupt:
    print("adapterlab: interrupted while loading; nothing was done", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
