"""``python -m grpo_monitor.catalog [--check]``: regenerate ``docs/metrics.md`` and the other generated docs."""

import sys

from .docs import main

sys.exit(main())
