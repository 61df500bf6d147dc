"""Files the command line reads and writes: :mod:`.reading` (recordings someone else made: regular files only,
bounded, worded errors) and :mod:`.writing` (outputs created without following a symlink)."""

from __future__ import annotations

from .reading import InputFileError, ReadLimits, limits, using_limits
from .writing import UnsafeOutputError, write_output

__all__ = ["InputFileError", "ReadLimits", "UnsafeOutputError", "limits", "using_limits", "write_output"]
