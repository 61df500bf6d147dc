"""``grpo-monitor audit``: probe an advantage function and name what it computes.

:mod:`.run` judges a function (``audit``, ``load_function``), :mod:`.probes` builds the probe
batches and runs them, :mod:`.registry` names the registry entries a function reproduces and
:mod:`.causes` the likely causes its symptoms point to.
"""

from .run import AuditResult, audit, load_function

__all__ = ["AuditResult", "audit", "load_function"]
