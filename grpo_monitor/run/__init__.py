"""The run's memory across steps: :mod:`.state` (``RunState``, the one stateful update of a step),
:mod:`.questions` (per-question view: iid prediction, overdispersion, stuck questions) and
:mod:`.history` (the bounded per-question history it reads); :mod:`.lifecycle` (the monitor's close, reopen and
saved state, validated by :mod:`.saved`), :mod:`.breach` (a breach's repro file). This package imports
:mod:`grpo_monitor.health` (it saves the tracker's state), never the reverse."""
