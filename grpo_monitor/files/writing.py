"""Creating the command line's outputs (``report.html``, ``plots/*.png``, ``compare.html``, ``run.json``, ...)
without ever following a symlink.

The rule is the repro files' (``grpo_monitor.repro.private_files.create_private_file``): a file is
created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so no existing name (a planted symlink or
file) is opened. An output that replaces an earlier one is first written under a fresh
random name in the same folder, then renamed over the old name (``rename`` replaces a
symlink itself, never its target, and a reader never sees half a file). The folder the
user names (``--out``) is theirs and may be a symlink; a folder the command creates inside
it (``plots/``) must be a real folder, and every file operation goes through the folder's
descriptor, so the folder cannot be swapped for a symlink half way. The mode is 0666
less the umask, as for any file a command writes.

>>> import tempfile, pathlib
>>> with OutputDir(tempfile.mkdtemp()) as out:
...     out.write("a.txt", "hello").read_text()
'hello'
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from types import TracebackType

from ..errors import UnsafeOutputError as UnsafeOutputError  # its home; this old path keeps working

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class OutputDir:
    """A folder the command writes into, held open by descriptor (see the module docstring).

    ``follow`` allows ``path`` itself to be a symlink (the folder the user named).
    """

    def __init__(self, path: str | os.PathLike, *, follow: bool = True):
        self.path = Path(path)
        if follow:
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            try:
                os.mkdir(self.path)
            except FileExistsError:
                pass
        try:
            self.fd = os.open(self.path, os.O_RDONLY | _DIRECTORY | _CLOEXEC | (0 if follow else _NOFOLLOW))
        except OSError as exc:
            what = "a symlink" if self.path.is_symlink() else "not a folder"
            raise UnsafeOutputError(f"{self.path} is {what}; refusing to write the outputs through it "
                                    "(remove it, or choose another --out)") from exc

    def folder(self, name: str) -> OutputDir:
        """A real sub-folder ``name`` (created when missing; a symlink there is refused)."""
        return OutputDir(self.path / name, follow=False)

    def write(self, name: str, data: bytes | str) -> Path:
        """Write ``data`` to ``name`` in this folder, replacing what was there (never through a symlink)."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        return self.path / name

    def remove(self, name: str) -> None:
        """Remove the file ``name`` when present (a symlink there is removed, not followed)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def write_output(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write one output file ``path`` (its folder created when missing) without following a symlink at ``path``."""
    path = Path(path)
    with OutputDir(path.parent) as out:
        return out.write(path.name, data)
