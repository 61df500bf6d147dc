"""Read ahead in a child process: parsing and grouping run beside the monitor, not before it.

Parsing JSON holds Python's GIL, so a thread would not overlap it with the monitor; a
child interpreter does. The child (``python -m grpo_monitor.tools.scan.prefetch SPEC``) opens
the same reader, groups each step and writes ``(kind, payload)`` pickles to its stdout:
``("step", (StepInfo, StepGroups))`` per step, then ``("done", (notes, warnings))``, or
``("error", (type name, message))``. A full pipe blocks the child, so memory holds a few
steps at most. A record that does not fit raises the same :class:`ScanInputError` as an
in-process scan; a child that dies is a ``RuntimeError`` quoting its stderr. The child is
a plain subprocess (not ``multiprocessing``), so a user's script is never re-imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...files.reading import InputFileError, limits, using_limits
from .columns import ColumnMap, ScanInputError

#: Errors the child sends back as themselves (anything else becomes a RuntimeError).
_KNOWN = {"ScanInputError": ScanInputError, "InputFileError": ScanInputError, "FileNotFoundError": FileNotFoundError,
          "OSError": OSError}


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """What the scan loop needs of a step's rows once they are grouped."""

    step: int
    num_rows: int
    units: int
    has_advantages: bool


def spec_of(path: str | Path, fmt: str, columns: ColumnMap, group_size: int | None) -> str:
    """The child's argument: what to open, as JSON."""
    return json.dumps({"path": str(path), "format": fmt, "columns": dataclasses.asdict(columns),
                       "group_size": group_size, "limits": dataclasses.asdict(limits())})


def prefetched_steps(path: str | Path, fmt: str, columns: ColumnMap, group_size: int | None,
                     notes: list[str]) -> Iterator[tuple[StepInfo, Any]]:
    """``(StepInfo, StepGroups)`` per step, read and grouped by a child process; its notes go to ``notes``.

    ``group_size`` is the monitor's (the option, or what the run declared).
    """
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "grpo_monitor.tools.scan.prefetch", spec_of(path, fmt, columns,
                                group_size)], stdout=subprocess.PIPE, stderr=err, env=env)
        assert proc.stdout is not None  # stdout=PIPE
        try:
            yield from _frames(proc, err, notes)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()


def _frames(proc: subprocess.Popen, err: Any, notes: list[str]) -> Iterator[tuple[StepInfo, Any]]:
    assert proc.stdout is not None  # started with stdout=PIPE
    while True:
        try:
            kind, payload = pickle.load(proc.stdout)
        except (EOFError, pickle.UnpicklingError, AttributeError, ImportError) as exc:
            proc.wait()
            err.seek(0)
            tail = err.read()[-2000:].decode("utf-8", "replace")
            raise RuntimeError(f"the scan's reader process ended without finishing (exit code {proc.returncode}): "
                               f"{exc!r}\n{tail}") from None
        if kind == "step":
            yield payload
        elif kind == "error":
            name, message = payload
            raise _KNOWN.get(name, RuntimeError)(message if name in _KNOWN else f"{name}: {message}")
        else:
            found, caught = payload
            notes.extend(found)
            for category, message in caught:
                warnings.warn(message, RuntimeWarning if category == "RuntimeWarning" else UserWarning, stacklevel=3)
            return


def produce(spec: dict[str, Any], out: Any) -> None:
    """The child's loop: open the reader, group each step, write the frames to ``out``."""
    from .detect import open_reader
    from .groups import build_groups

    def send(kind: str, payload: Any) -> None:
        pickle.dump((kind, payload), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    fields: dict[str, Any] = {k: tuple(v) if k == "reward" and v is not None else v
                              for k, v in spec["columns"].items()}
    columns = ColumnMap(**fields)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            reader = open_reader(spec["path"], spec["format"], columns, spec["group_size"])
            for rows in reader.steps():
                info = StepInfo(rows.step, rows.num_rows, rows.units, rows.advantages is not None)
                send("step", (info, build_groups(rows, spec["group_size"])))
        except (InputFileError, OSError) as exc:
            send("error", (type(exc).__name__ if type(exc).__name__ in _KNOWN else "OSError", str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug: its text goes back to the parent
            send("error", (type(exc).__name__, str(exc)))
            return
    send("done", (reader.notes, [(w.category.__name__, str(w.message)) for w in caught]))


def main() -> int:
    """``python -m grpo_monitor.tools.scan.prefetch SPEC``: frames on stdout; anything printed goes to stderr."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr
    try:
        spec = json.loads(sys.argv[1])
        with using_limits(**spec.get("limits", {})):  # the parent's --max-line-bytes / --max-file-bytes
            produce(spec, out)
    except BrokenPipeError:  # the parent stopped reading (an error on its side): nothing left to do
        return 1
    return 0


if __name__ == "__main__":  # run under its package name, so the pickled classes name their real module
    from grpo_monitor.tools.scan.prefetch import main as _main

    sys.exit(_main())
