"""The teaching demo: the finite-group article's Bernoulli policy trained with GRPO, the monitor attached.

>>> from grpo_monitor.tools.demo import BUGS, DemoConfig
>>> DemoConfig().group_size, "wrong_axis" in BUGS
(8, True)
"""

from .bugs import BUGS, Bug, pipeline_for
from .pipeline import CORRECT, Pipeline, grpo_advantages
from .run import DemoResult, run_demo
from .trainer import DemoConfig, DemoTrainer

__all__ = [
    "BUGS", "Bug", "CORRECT", "DemoConfig", "DemoResult", "DemoTrainer", "Pipeline", "grpo_advantages",
    "pipeline_for", "run_demo",
]
