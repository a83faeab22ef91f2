"""`python -m ltm …`: the `ltm` command, from a checkout or a virtualenv without the script."""

import sys

from ltm.main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
