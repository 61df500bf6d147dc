"""The ``grpo-monitor`` command line: one module per subcommand.

Each subcommand module exposes ``add_parser(subparsers)`` (which registers the
subcommand and sets ``func``) and is listed in ``_SUBCOMMANDS``; ``func(args)`` returns
the exit code. Building the parser imports no torch, numpy or matplotlib (``--help``
answers at once): each subcommand imports what it needs inside its ``run``, and choices
that live in heavy modules are :class:`LazyChoices`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

#: Subcommand modules under ``grpo_monitor.tools.cli``; a missing one is skipped.
_SUBCOMMANDS = ("demo", "report", "audit", "theory", "wandb_workspace", "scan", "compare", "questions", "doctor")


def build_parser() -> argparse.ArgumentParser:
    """The ``grpo-monitor`` parser with every subcommand module that imports."""
    parser = argparse.ArgumentParser(
        prog="grpo-monitor", description="Monitoring and invariant checks for GRPO training runs."
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version of grpo-monitor and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit code (2: no subcommand)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    formatwarning = warnings.formatwarning
    # a warning quoting a recorded file or field name is escaped like everything else printed
    warnings.formatwarning = lambda *a, **k: printable(formatwarning(*a, **k))
    try:
        return int(args.func(args) or 0)
    finally:
        warnings.formatwarning = formatwarning


def package_version() -> str:
    """The installed distribution's version, or ``grpo_monitor.__version__`` when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("grpo-monitor")
    except metadata.PackageNotFoundError:
        from ... import __version__

        return __version__


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (building the parser stays cheap)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
        print(f"{parser.prog} {package_version()}")
        parser.exit()


class LazyChoices:
    """An argparse ``choices`` container filled on first use, from a module the parser must not import.

    Give the argument a ``metavar`` (argparse lists choices without one when it builds the
    parser) and write ``%(choices)s`` in its help.

    >>> choices = LazyChoices(lambda: ("population", "bessel"))
    >>> "bessel" in choices, str(choices)
    (True, 'population, bessel')
    """

    def __init__(self, load: Callable[[], Iterable[str]]):
        self._load = load
        self._values: tuple[str, ...] | None = None

    def _get(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    def __contains__(self, value: object) -> bool:
        return value in self._get()

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __str__(self) -> str:
        return ", ".join(self._get())


#: Exit code of a command that needs an optional package (an extra) that is not installed: not bad input (2),
#: not a breach the monitor caught (1).
MISSING_EXTRA = 3


def missing_extra(command: str, needs: str, package: str, extra: str) -> int:
    """Say that ``needs`` wants ``package``, not installed, and the extra that brings it; return :data:`MISSING_EXTRA`.

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     code = missing_extra("demo", "--wandb", "wandb", "wandb")
    >>> code, err.getvalue().strip().split("; ")[1]
    (3, "install it with `pip install 'grpo-monitor[wandb]'`")
    """
    return fail(command, f"{needs} needs the {package} package, which is not installed; install it with "
                f"`pip install 'grpo-monitor[{extra}]'`", code=MISSING_EXTRA)


def fail(command: str, message: object, code: int = 2) -> int:
    """Print ``grpo-monitor COMMAND: error: MESSAGE`` to stderr and return ``code`` (2: bad input)."""
    print(printable(f"grpo-monitor {command}: error: {message}"), file=sys.stderr)
    return code


def byte_count(text: str) -> int:
    """An argparse ``type``: a number of bytes >= 1 (``256M``, ``2G`` and ``64K`` accepted)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of bytes >= 1 (e.g. 268435456 or 256M), but got {text!r}")
    return value


def add_read_limits(parser: argparse.ArgumentParser) -> None:
    """``--max-line-bytes`` and ``--max-file-bytes`` (see ``grpo_monitor.files.reading``)."""
    parser.add_argument("--max-line-bytes", type=byte_count, default=None, metavar="N",
                        help="refuse a line (one JSON record) longer than N bytes (default: "
                        "$GRPO_MONITOR_MAX_LINE_BYTES or 256M)")
    parser.add_argument("--max-file-bytes", type=byte_count, default=None, metavar="N",
                        help="refuse an input file larger than N bytes (default: $GRPO_MONITOR_MAX_FILE_BYTES or 16G)")


def read_limits(args: argparse.Namespace) -> Any:
    """The context that reads with the limits given on the command line."""
    from ...files.reading import using_limits

    return using_limits(getattr(args, "max_line_bytes", None), getattr(args, "max_file_bytes", None))


#: C0 and C1 control characters but tab and line feed, and DEL: escaped before they reach a terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0))}


def printable(text: object) -> str:
    r"""``text`` with control characters (ESC, BEL, CR, ...) escaped as ``\xNN``: a field or file name from a
    recording cannot drive the terminal.

    >>> printable("run\x1b]0;owned\x07.jsonl")
    'run\\x1b]0;owned\\x07.jsonl'
    """
    return str(text).translate(_CONTROL)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
