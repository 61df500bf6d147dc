"""Loading the user's ``MODULE:FUNCTION`` (``audit``, ``scan --estimator``) without leaving the working folder on
``sys.path``: only the module the user named is imported from there."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

from .probes import AdvantageFn


def load_function(spec: str) -> AdvantageFn:
    """``MODULE:FUNCTION`` where MODULE is a dotted module (importable from the current folder) or a .py path."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(f"expected MODULE:FUNCTION (e.g. mypkg.adv:grpo_advantages or ./adv.py:fn), got {spec!r}")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        if not os.path.isfile(module_part):
            raise ValueError(f"module file {module_part!r} does not exist")
        name = f"_grpo_audit_{os.path.splitext(os.path.basename(module_part))[0]}"
        loader = importlib.util.spec_from_file_location(name, module_part)
        if loader is None or loader.loader is None:
            raise ValueError(f"module file {module_part!r} cannot be imported")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        loader.loader.exec_module(module)
    else:
        module = import_from_folder(module_part, os.getcwd())
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_part!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec!r} is not callable: got {type(obj).__name__}")
    return obj


def import_from_folder(dotted: str, folder: str) -> Any:
    """Import the module ``dotted`` the user named, its top package looked for in ``folder`` first.

    ``folder`` is on ``sys.path`` only while that module (and what it imports) loads, and at the
    end of it, so nothing there shadows an installed module (a planted ``html.py`` or
    ``tensorboard.py`` in a shared working folder); ``sys.path`` is restored afterwards.
    """
    top = dotted.partition(".")[0]
    added = folder not in sys.path
    if added:
        sys.path.append(folder)
    try:
        if top not in sys.modules:
            spec = importlib.machinery.PathFinder.find_spec(top, [folder])
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[top] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(top, None)
                    raise
        return importlib.import_module(dotted)
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
