"""Catalogues: the one record of each concept the rest of the package derives from.

:mod:`.metrics` holds ``METRICS`` (every key the monitor emits); ``INVARIANTS`` (every invariant it
checks) lives in :mod:`grpo_monitor.invariants`, beside the checks (:mod:`.invariants` is its old path).
``python -m grpo_monitor.catalog`` regenerates the documents made from them (:data:`.docs.GENERATED`,
e.g. ``docs/metrics.md``).
"""
