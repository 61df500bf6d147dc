"""Catalogues: the one record of each concept the rest of the package derives from.

:mod:`.metrics` holds ``METRICS`` (every key the monitor emits), :mod:`.invariants` holds
``INVARIANTS`` (every invariant it checks). ``python -m grpo_monitor.catalog`` regenerates
the documents made from them (:data:`.docs.GENERATED`, e.g. ``docs/metrics.md``).
"""
