"""``python -m mail.server``: the same as ``mail server``."""

import sys

from mail.cli import main

if __name__ == "__main__":
    sys.exit(main(["server", *sys.argv[1:]]))
