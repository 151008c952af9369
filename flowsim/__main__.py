"""``python -m flowsim``: the ``flowsim`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
