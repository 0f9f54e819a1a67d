"""``python -m mail.server``: the same as ``mail server``."""

import sys

from mail.cli import entry

if __name__ == "__main__":
    entry(["server", *sys.argv[1:]])
