"""The offline tools: the command line and what it runs (scan, reporting, audit, demo, doctor, theory).

They import the core (the monitor, its statistics, catalogue and sinks); the core never imports them
(``tests/test_floor_plan.py`` holds it). Their old paths (``grpo_monitor.tools.scan``, ``grpo_monitor.tools.reporting``,
``grpo_monitor.tools.theory``, ...) keep working as aliases of these, with a ``DeprecationWarning``.
"""
