"""``python -m pscore.server``: the ``pserver`` command. A package's ``__main__`` is a module of
its own, so running it does not import pscore.server a second time (``import pscore`` already
did), which a plain ``server.py`` run with -m would."""

import sys

from pscore.server import main

sys.exit(main())
