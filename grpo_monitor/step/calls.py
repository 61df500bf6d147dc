"""Calls that do not bind are the caller's error: an unknown keyword is named with the nearest valid one.

The valid names come from each public method's signature (so a keyword added later is
covered with no list to update); :data:`grpo_monitor.errors.SYNONYMS` only ranks the suggestion.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import unknown_keywords
from .inputs import InputTypeError


def check_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Raise :class:`InputTypeError` when ``fn(*args, **kwargs)`` does not bind to ``fn``'s signature.

    An unknown keyword is named with the nearest valid one, so new keywords are covered
    with no list to update:

    >>> def observe(rewards, *, question_ids=None): ...
    >>> check_call(observe, [1], {"prompt_ids": [0]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    grpo_monitor.errors.InputTypeError: observe() got an unexpected keyword argument 'prompt_ids'; did you mean ...
    """
    shape = _shape(fn)
    if shape.binds(args, kwargs):  # the common case, a few set operations
        return
    sig = shape.signature
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        valid = [p.name for p in sig.parameters.values() if p.name != "self"
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = [k for k in kwargs if k not in sig.parameters]
        if not unknown:
            raise InputTypeError(f"{call_name(fn)}(): {exc}; its arguments are {', '.join(valid)}") from None
        raise unknown_keywords(call_name(fn), unknown, valid, listed=True) from None


def call_name(fn: Callable[..., Any]) -> str:
    """How the caller wrote the call: a method's name, a class for its ``__init__``, ``verl.attach`` for an
    integration's function.

    >>> from grpo_monitor import GRPOMonitor
    >>> call_name(GRPOMonitor.__init__), call_name(GRPOMonitor.end_step)
    ('GRPOMonitor', 'end_step')
    """
    qualname = getattr(fn, "__qualname__", fn.__name__)
    if qualname.endswith(".__init__"):
        return qualname.rsplit(".", 2)[-2]
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("grpo_monitor.integrations.") and "." not in qualname:
        return f"{module.rsplit('.', 1)[1]}.{fn.__name__}"
    return fn.__name__


def checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with every call checked by :func:`check_call` first: a constructor's or an ``attach``'s misspelt
    keyword is the caller's :class:`InputTypeError` naming the nearest valid one, not Python's bare ``TypeError``.

    >>> @checked
    ... def attach(monitor=None, *, sinks="auto"): ...
    >>> attach(sink=None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    grpo_monitor.errors.InputTypeError: attach() got an unexpected keyword argument 'sink'; did you mean sinks? ...
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_call(fn, args, kwargs)
        return fn(*args, **kwargs)

    return wrapper


@dataclasses.dataclass(frozen=True)
class _CallShape:
    """What a call must look like to bind to ``signature`` (a plain signature: no ``*args``/``**kwargs``)."""

    signature: inspect.Signature
    positional: tuple[str, ...]  # positional-or-keyword parameters, in order
    required: tuple[str, ...]  # parameters without a default
    keywords: frozenset[str]  # names a keyword may take
    plain: bool  # no *args/**kwargs, no positional-only parameter: binds() can answer

    def binds(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        """True when the call binds (False: ask the signature, which words the error)."""
        if not self.plain or len(args) > len(self.positional) or not self.keywords.issuperset(kwargs):
            return False
        given = set(self.positional[:len(args)])
        return given.isdisjoint(kwargs) and all(n in given or n in kwargs for n in self.required)


@functools.cache
def _shape(fn: Callable[..., Any]) -> _CallShape:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    kinds = {p.kind for p in params}
    plain = not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD,
                         inspect.Parameter.POSITIONAL_ONLY}
    return _CallShape(
        sig, tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD),
        tuple(p.name for p in params if p.default is p.empty), frozenset(p.name for p in params), plain,
    )
