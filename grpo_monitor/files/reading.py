"""Reading files somebody else made (recorded rollouts, a run's log): regular files only, bounded, worded.

The rules every reader of ``scan``, ``report`` and ``compare`` follows:

- **only regular files** are read: a FIFO (it would block), a device (``/dev/zero`` never
  ends), a socket or a folder named as a file is refused by name; the check is made on the
  opened descriptor (``O_NONBLOCK``, then ``fstat``), so it cannot be swapped after it;
- a file found **inside a folder** being read may be a symlink only to a regular file in
  that same folder; one leaving it is refused;
- each **file** is at most ``max_file_bytes`` and each **line** at most ``max_line_bytes``
  (:func:`limits`: ``--max-file-bytes`` / ``--max-line-bytes``, else the environment
  variables :data:`FILE_ENV` / :data:`LINE_ENV`, else 16 GiB and 256 MiB); a line is
  gathered in a ``bytearray`` (linear time) and decoded once, so a long line costs about
  twice its size in memory, not five times;
- **JSON** that nests deeper than the parser's limit or holds a number out of range is a
  worded :class:`InputFileError` naming the file and the line, never a ``RecursionError``.

>>> limits().max_line_bytes >= 1 << 20
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import InputFileError as InputFileError  # its home; this old path keeps working

LINE_ENV = "GRPO_MONITOR_MAX_LINE_BYTES"
FILE_ENV = "GRPO_MONITOR_MAX_FILE_BYTES"
DEFAULT_MAX_LINE_BYTES = 256 << 20
DEFAULT_MAX_FILE_BYTES = 16 << 30
BLOCK_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class ReadLimits:
    """The largest line and file a reader accepts, in bytes."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES


_override: list[ReadLimits] = []


def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InputFileError(f"{name} must be a number of bytes (an integer >= 1), but got {text!r}") from None
    if value < 1:
        raise InputFileError(f"{name} must be a number of bytes (an integer >= 1), but got {text!r}")
    return value


def limits() -> ReadLimits:
    """The limits in force: those of :func:`using_limits`, else the environment's, else the defaults."""
    if _override:
        return _override[-1]
    return ReadLimits(_env_bytes(LINE_ENV, DEFAULT_MAX_LINE_BYTES), _env_bytes(FILE_ENV, DEFAULT_MAX_FILE_BYTES))


@contextlib.contextmanager
def using_limits(max_line_bytes: int | None = None, max_file_bytes: int | None = None) -> Iterator[ReadLimits]:
    """Read with these limits inside the block (None: the environment's or the default)."""
    base = limits()
    chosen = ReadLimits(max_line_bytes or base.max_line_bytes, max_file_bytes or base.max_file_bytes)
    _override.append(chosen)
    try:
        yield chosen
    finally:
        _override.pop()


def where(source: Any, line: int | None) -> str:
    return f"{source}, line {line}" if line is not None else str(source)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def check_inside(path: Path, folder: Path | None) -> None:
    """Refuse ``path`` when it is a symlink whose target leaves ``folder`` (None: no folder to stay in)."""
    if folder is None or not path.is_symlink():
        return
    target, root = path.resolve(), folder.resolve()
    if target != root and root not in target.parents:
        raise InputFileError(f"{path}: a symlink to {target}, outside the folder being read ({root}); refusing to "
                             "follow it (copy the file in if it belongs to this run)")


def open_input(path: str | os.PathLike, folder: Path | None = None) -> IO[bytes]:
    """``path`` opened for reading if it is a regular file within the limits (see the module docstring)."""
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO does not wait for a writer
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            link = f" (a symlink to {os.path.realpath(path)})" if path.is_symlink() else ""
            raise InputFileError(f"{path}{link}: {_kind(st.st_mode)}, not a regular file; refusing to read it")
        check_inside(path, folder)
        limit = limits().max_file_bytes
        if st.st_size > limit:
            raise InputFileError(f"{path}: {st.st_size} bytes, over the file size limit of {limit} bytes; "
                                 f"raise it with --max-file-bytes N (or {FILE_ENV}=N)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike, folder: Path | None = None) -> int:
    """The size of ``path`` after the checks of :func:`open_input`."""
    with open_input(path, folder) as f:
        return os.fstat(f.fileno()).st_size


def read_input(path: str | os.PathLike, folder: Path | None = None) -> bytes:
    """The whole of a regular file within the file limit (a file that grows past it while read is refused)."""
    limit = limits().max_file_bytes
    with open_input(path, folder) as f:
        # a buffer sized by the file, not by the limit (16 GiB: refused under a ulimit -v or a strict overcommit)
        data = f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
        while len(data) <= limit and (more := f.read(min(BLOCK_BYTES, limit + 1 - len(data)))):
            data += more  # the file grew while read
    if len(data) > limit:
        raise InputFileError(f"{path}: over the file size limit of {limit} bytes; raise it with "
                             f"--max-file-bytes N (or {FILE_ENV}=N)")
    return data


def line_too_long(source: Any, line: int, limit: int) -> InputFileError:
    return InputFileError(f"{where(source, line)}: a line longer than {limit} bytes (the line size limit); "
                          f"raise it with --max-line-bytes N (or {LINE_ENV}=N)")


def read_text_blocks(f: IO[bytes], source: Any, block: int = BLOCK_BYTES) -> Iterator[tuple[str, int, int, bool]]:
    """``(text, first line number, bytes, last)`` of successive blocks of whole lines of ``f``.

    ``text`` is the block decoded, without its final line break; ``last`` marks the block
    that ends the file. A line over the line limit is an :class:`InputFileError` naming it.
    The pending part of a long line grows in place (linear time) and each block is decoded
    once and then dropped, so a line costs about twice its size in memory.
    """
    limit, file_limit = limits().max_line_bytes, limits().max_file_bytes
    size = max(1, min(block, limit))  # a line inside one chunk is then within the limit
    buf, line = bytearray(), 1
    chunk = f.read(size)
    total = len(chunk)
    while chunk:
        ahead = f.read(size)  # read ahead: the block that ends the file is marked ``last``
        total += len(ahead)
        if total > file_limit:
            raise InputFileError(f"{source}: over the file size limit of {file_limit} bytes; raise it with "
                                 f"--max-file-bytes N (or {FILE_ENV}=N)")
        start = len(buf)
        buf += chunk
        first = buf.find(b"\n", start)  # what came before ``start`` holds no line break
        if (first < 0 and len(buf) > limit) or first > limit:
            raise line_too_long(source, line, limit)
        cut = len(buf) if not ahead else buf.rfind(b"\n", start)
        chunk = ahead
        if cut < 0:
            continue
        tail = bytes(buf[cut + 1:])
        del buf[cut:]
        data, buf, nbytes = buf, bytearray(tail), cut + 1 if ahead else cut
        if not ahead and data.endswith(b"\n"):
            del data[-1:]
        text = decode_utf8(data, source, line)
        del data
        lines = text.count("\n") + 1
        yield text, line, nbytes, not ahead
        del text
        line += lines


def decode_utf8(data: bytes | bytearray | memoryview, source: Any, line: int) -> str:
    """``data`` as text, or a worded error naming the line of the first byte that is not UTF-8."""
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        at = line + bytes(memoryview(data)[: exc.start]).count(b"\n")
        raise InputFileError(f"{where(source, at)}: not UTF-8 text ({exc.reason} at byte {exc.start}); JSON files "
                             "are UTF-8") from exc


def first_line(path: str | os.PathLike, folder: Path | None = None) -> tuple[int, bytes]:
    """(line number, bytes) of the first non-blank line of a file, within the line limit; (0, b"") when none."""
    limit = limits().max_line_bytes
    with open_input(path, folder) as f:
        for number in range(1, 1 << 62):
            raw = f.readline(limit + 1)
            if not raw:
                return 0, b""
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise line_too_long(path, number, limit)
            if raw.strip():
                return number, raw
    return 0, b""  # pragma: no cover


def bounded_error(exc: BaseException, source: Any, line: int | None) -> InputFileError | None:
    """The worded error for JSON the parser cannot hold (too deep, a number out of range); None for others."""
    if isinstance(exc, RecursionError):
        return InputFileError(f"{where(source, line)}: JSON nested deeper than the reader allows (about "
                              f"{_depth()} levels); recorded rows and settings are flat objects")
    if isinstance(exc, ValueError) and not isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return InputFileError(f"{where(source, line)}: a number out of range ({exc})")
    return None


def _depth() -> int:
    import sys

    return sys.getrecursionlimit()


def loads(text: str | bytes | bytearray, source: Any, line: int | None = None) -> Any:
    """``json.loads(text)``; too deep or out-of-range numbers are :class:`InputFileError` naming the file and line.

    A text that is not JSON raises ``json.JSONDecodeError`` as usual (a torn line is the caller's call).

    >>> loads('{"a": 1}', "x.jsonl", 1)
    {'a': 1}
    """
    try:
        return json.loads(text)
    except (RecursionError, ValueError) as exc:
        error = bounded_error(exc, source, line)
        if error is None:
            raise
        raise error from None
