"""Breach files: :mod:`.save` writes the tensors the live check used (one format, :data:`.save.FORMAT`),
:mod:`.replay` loads them and replays them through a fresh monitor (``grpo_monitor.load_repro``,
``grpo_monitor.replay``); :mod:`.private_files` creates them private, never through a symlink.

Nothing is imported here: the monitor imports :mod:`.save`, and :mod:`.replay` imports the monitor.
"""
