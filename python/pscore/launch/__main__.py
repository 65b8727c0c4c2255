"""``python -m pscore.launch``: the ``pscore-run`` command."""

import sys

from .launcher import main

sys.exit(main())
