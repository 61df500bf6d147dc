"""Private folders and files for what the monitor writes outside the user's own paths.

On a shared machine the temporary folder is everybody's: another local user can create
``/tmp/grpo-monitor-repro`` first, plant symlinks in it, or plant a shared library where a
cache is expected. The rules here are ssh's for its keys:

- a folder is used only if it is a real directory (not a symlink), owned by the current
  user, and writable by nobody else (no group/other write bit); one we create is 0700;
- a file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600, so an existing
  name (a planted symlink or file) is never opened, let alone overwritten;
- a file is loaded only if it is a regular file owned by the current user and writable
  by nobody else.

When the preferred folder fails these checks, :func:`fallback_private_dir` makes a fresh
one with :func:`tempfile.mkdtemp` (random name, mode 0700).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import UnsafePathError as UnsafePathError  # its home; this old path keeps working


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None  # None: no POSIX owners (Windows)


def check_private(path: str | os.PathLike, *, kind: str = "dir") -> Path:
    """``path`` if it is a ``kind`` ("dir" or "file") owned by us and not writable by others.

    Symlinks are refused (``lstat``), so the check cannot be redirected.

    >>> import tempfile; check_private(tempfile.mkdtemp()).is_dir()
    True
    """
    path = Path(path)
    _check_stat(os.lstat(path), path, kind)
    return path


def _check_stat(st: os.stat_result, path: Path, kind: str) -> None:
    """Raise :class:`UnsafePathError` unless ``st`` is a ``kind`` owned by us and not writable by others."""
    expected = stat.S_ISDIR if kind == "dir" else stat.S_ISREG
    if not expected(st.st_mode):
        what = ("a symlink" if stat.S_ISLNK(st.st_mode)
                else "not a " + ("directory" if kind == "dir" else "regular file"))
        raise UnsafePathError(f"{path} is {what}; refusing to use it")
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        raise UnsafePathError(f"{path} is owned by uid {st.st_uid}, not by the current user (uid {uid}); "
                              "refusing to use it")
    if uid is not None and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}); "
                              "refusing to use it")


def private_dir(path: str | os.PathLike) -> Path:
    """``path`` as a private folder: created 0700 (parents as usual) if missing, then verified.

    Raises :class:`UnsafePathError` when it exists but is not private, ``OSError`` when it
    cannot be created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return check_private(path)


def fallback_private_dir(prefix: str) -> Path:
    """A fresh private folder in the temporary directory (random name, 0700)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def user_private_dir(name: str) -> tuple[Path, str | None]:
    """``<tmp>/<name>-<uid>`` made private, else a fresh private folder.

    Returns the folder and, when the fallback was taken, why (for one warning).
    """
    uid = _uid()
    preferred = Path(tempfile.gettempdir()) / (f"{name}-{uid}" if uid is not None else name)
    try:
        return private_dir(preferred), None
    except OSError as exc:
        return fallback_private_dir(f"{name}-{uid}-"), str(exc)


def create_private_file(path: str | os.PathLike) -> int:
    """A new file at ``path``, opened for writing with mode 0600; its file descriptor.

    Never follows a symlink and never opens an existing name (``FileExistsError``).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o600)


def open_private_append(path: str | os.PathLike) -> int:
    """``path`` opened for reading and appending, created with mode 0600 when missing; its file descriptor.

    Never through a symlink (``O_NOFOLLOW``: a planted link is :class:`UnsafePathError`); an
    existing file is used only if it is a regular file owned by us and writable by nobody else
    (checked on the opened descriptor, so it cannot be swapped in between). For logs the
    monitor appends to across a resume, in a folder :func:`private_dir` checked.
    """
    path = Path(path)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafePathError(f"{path} is a symlink; refusing to use it") from exc
        raise
    try:
        _check_stat(os.fstat(fd), path, "file")
    except BaseException:
        os.close(fd)
        raise
    return fd
