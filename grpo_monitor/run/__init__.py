"""The run's memory across steps: :mod:`.state` (``RunState``, the one stateful update of a step),
:mod:`.questions` (per-question view: iid prediction, overdispersion, stuck questions) and
:mod:`.history` (the bounded per-question history it reads)."""
