"""``python -m grpo_monitor``: the ``grpo-monitor`` command line."""

import sys

from .tools.cli import main

sys.exit(main())
