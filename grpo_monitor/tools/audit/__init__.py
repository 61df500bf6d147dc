"""``grpo-monitor audit``: probe an advantage function and name what it computes.

:mod:`.run` judges a function (``audit``; :mod:`.loading` has ``load_function``), :mod:`.probes` builds the probe
batches and runs them, :mod:`.registry` names the registry entries a function reproduces and
:mod:`.causes` the likely causes its symptoms point to.
"""

from .loading import load_function
from .run import AuditResult, audit

__all__ = ["AuditResult", "audit", "load_function"]
