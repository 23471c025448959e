"""``python -m training``: the same as ``barkwatch-train``."""

import sys

from training.cli import main

sys.exit(main())
