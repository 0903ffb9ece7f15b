"""``python -m tapejit``: the demo; ``python -m tapejit --help`` lists the commands
(``warmup``, ``cache info|clear``, ``stub``: tapejit/_cli.py)."""
import sys

from tapejit._cli import main

if __name__ == "__main__":
    sys.exit(main())
