"""``python -m grpo_monitor``: the ``grpo-monitor`` command line."""

import sys

from .cli import main

sys.exit(main())
