"""The framework examples' first step: is the framework importable in this Python? If not, say how to get it.

OpenRLHF, SkyRL and AReaL pin versions that conflict with verl's (the README's ``.venv``) and
with each other, so each lives in its own venv made by ``scripts/framework_venv.sh NAME``.
Run in the wrong Python, an example prints the one command that builds that venv and runs
it there, and exits 2, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: example name -> (the framework's name, its top-level module)
FRAMEWORKS = {"openrlhf": ("OpenRLHF", "openrlhf"), "skyrl": ("SkyRL", "skyrl"), "areal": ("AReaL", "areal")}


def require_framework(name: str) -> None:
    """Return when ``name``'s framework imports here; else print the command that builds its venv, exit 2."""
    title, module = FRAMEWORKS[name]
    if importlib.util.find_spec(module) is not None:
        return
    print(f"examples/{name}_example.py needs {title}, which is not installed in {sys.executable} (it lives in its "
          f"own venv); build it and run the example there with:\n"
          f"  bash scripts/framework_venv.sh {name} && .venvs/{name}/bin/python examples/{name}_example.py",
          file=sys.stderr)
    raise SystemExit(2)


@contextlib.contextmanager
def output_folder(description: str) -> Iterator[Path]:
    """The example's output folder: ``--out DIR`` (kept), else a temporary folder removed at the end.

    The monitor's log lands in ``<folder>/grpo-monitor/monitor.jsonl`` (the framework's output folder, as a real
    run's ``sinks="auto"`` fallback has it), never in the working folder; the last line says where it went.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the monitor's log (default: a temporary folder, removed at the end)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpo-example-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        yield out
        log = out / "grpo-monitor" / "monitor.jsonl"
        print(f"log: {log}" if args.out else "log removed with its temporary folder (pass --out DIR to keep it)")
