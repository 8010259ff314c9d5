"""``python -m lifecore`` is the ``lifecore`` command."""

import sys

from .cli import main

sys.exit(main())
