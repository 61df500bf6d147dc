"""The API boundary: turn what a trainer hands us into checked tensors and a group index.

Every error names the argument, what was expected and what came. The names are imported
from here; each lives in one module:

- :mod:`.tensors`: the input errors (re-exported from :mod:`grpo_monitor.errors`),
  :func:`as_tensor` and the tensor kinds it refuses;
- :mod:`.grouping`: the group layouts (:func:`group_layout`) and per-row arguments aligned with them;
- :mod:`.ids`: group and question ids as plain Python values (:func:`plain_id`, :func:`plain_state`);
- :mod:`.scalars`: ``end_step``'s step, ``observe_loss``'s ``loss``/``rows``, ``add_metrics``' dict.
"""

from __future__ import annotations

from .grouping import (
    GroupLayout,
    align_components,
    align_rows,
    align_rows_k,
    factorize,
    group_layout,
    per_group_labels,
    token_counts,
    truncation_rows,
)
from .ids import id_list, plain_id, plain_state
from .scalars import finite_number, loss_arg, rows_arg, step_arg, user_metrics
from .tensors import (
    SUPPORTED,
    InputError,
    InputTypeError,
    InputValueError,
    as_tensor,
    boundary,
    check_kind,
    check_values,
)

__all__ = [
    "SUPPORTED", "GroupLayout", "InputError", "InputTypeError", "InputValueError", "align_components", "align_rows",
    "align_rows_k", "as_tensor", "boundary", "check_kind", "check_values", "factorize", "finite_number",
    "group_layout", "id_list", "loss_arg", "per_group_labels", "plain_id", "plain_state", "rows_arg", "step_arg",
    "token_counts", "truncation_rows", "user_metrics",
]
