"""Finding the trainer's objects from inside a wrapped entry point: the calling trainer (caller frames), the
classes that define a hooked method (loaded subclasses), and every module binding of a wrapped function."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def trainer_setting(path: Sequence[str], limit: int = 10) -> Any:
    """``self.<path...>`` of the nearest caller up the stack whose ``self`` has it (the trainer that calls the
    entry point, e.g. ``("config", "trainer")`` on verl's ``RayPPOTrainer``); None when no caller has it."""

    def setting(f_locals: dict[str, Any]) -> Any:
        value = f_locals.get("self")
        for name in path:
            value = getattr(value, name, None)
        return value

    return caller_first(setting, limit)


def caller_first(pick: Callable[[dict[str, Any]], Any], limit: int = 10) -> Any:
    """The first non-None ``pick(frame.f_locals)`` over ``limit`` frames up the stack, starting at the caller of
    the function that calls this (the entry point's caller, for a lookup called by the wrapper); None when none."""
    frame: types.FrameType | None = sys._getframe(2)
    try:
        for _ in range(limit):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            found = pick(frame.f_locals)
            if found is not None:
                return found
        return None
    finally:
        del frame


def subclasses_defining(base: type, name: str) -> list[type]:
    """``base`` and every loaded subclass of it whose own ``__dict__`` defines ``name``."""
    out, todo = [], [base]
    while todo:
        cls = todo.pop()
        if name in vars(cls) and cls not in out:
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def module_references(prefixes: Iterable[str], original: Any) -> list[tuple[Any, str]]:
    """``(module, attribute)`` of every loaded module under ``prefixes`` bound to ``original``."""
    found = []
    prefixes = tuple(prefixes)
    for modname, module in list(sys.modules.items()):
        if module is None or not any(modname == p or modname.startswith(p + ".") for p in prefixes):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                found.append((module, attr))
    return found
