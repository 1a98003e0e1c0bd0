"""`python -m ckptstat` and the console script: the quick path (commands/quick.py) first, else the typer CLI,
imported only then."""
from __future__ import annotations

import sys

from .commands.quick import quick


def run() -> None:
    args = sys.argv[1:]
    rc = quick([a for a in args if a != "--debug"], "--debug" in args)
    if rc is None:
        from .cli import main

        rc = main()
    sys.exit(rc)


if __name__ == "__main__":
    run()
