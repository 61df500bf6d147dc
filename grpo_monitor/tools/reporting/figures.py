"""The report's figures in page order: one record per figure (name, title, keys, drawing, caption).

``keys`` are the metrics a figure draws or states, the principal one first; the page lists
every other logged metric in a table, so nothing the run logged goes unseen. A figure the
run lacks gets a note saying what to set, in the integration the run came from, to log its
principal key (:func:`.notes.advice`). The figures metric families declare
(:data:`grpo_monitor.catalog.families.DECLARED_FIGURES`) are drawn by :mod:`.declared` and
placed after the figure each names; ``PAGE`` is every figure, ``FIGURES`` those a run is
told about when it lacks them.
"""

from __future__ import annotations

from ...catalog.families import DECLARED_FIGURES
from . import captions, plots, plots_offpolicy, plots_tokens
from .declared import report_spec
from .notes import advice
from .plots_core import FigureSpec

_KL_KEYS = tuple(f"grpo/kl/{k}_mean" for k in ("k1", "k2", "k3")) + ("grpo/kl/user_mean",)

_DRAWN: tuple[FigureSpec, ...] = (
    FigureSpec("violations", "Violations", ("grpo/invariants/violations",), plots.draw_violations, captions.violations),
    FigureSpec("degenerate", "Degenerate groups",
               ("grpo/groups/degenerate_rate", "grpo/groups/degenerate_rate_iid",
                "grpo/sampling/generated_degenerate_rate", "grpo/sampling/degenerate_rate_iid"),
               plots.draw_degenerate, captions.degenerate),
    FigureSpec("prompts", "Effective prompts",
               ("grpo/groups/effective_prompts", "grpo/groups/total", "grpo/reward/mean"),
               plots.draw_prompts, captions.prompts),
    FigureSpec("question_std", "Per-question reward std", ("grpo/reward/question_std_mean",),
               plots.draw_question_std, captions.question_std),
    FigureSpec("advantages", "Advantage invariants",
               ("grpo/adv/group_mean_abs_max", "grpo/adv/live_std_mean", "grpo/adv/degenerate_abs_max"),
               plots.draw_advantages, captions.advantages),
    FigureSpec("convention", "Estimator and stabilizer",
               ("grpo/adv/estimator_id", "grpo/adv/convention_id", "grpo/adv/convention_scale", "grpo/adv/stabilizer"),
               plots.draw_convention, captions.convention),
    FigureSpec("overdispersion_stuck", "Overdispersion and stuck questions",
               ("grpo/groups/overdispersion", "grpo/sampling/stuck_questions"),
               plots.draw_overdispersion_stuck, captions.overdispersion_stuck),
    FigureSpec("kl", "KL estimators", _KL_KEYS, plots.draw_kl, captions.kl),
    FigureSpec("ratio", "Importance ratio and clipping",
               ("grpo/ratio/mean", "grpo/ratio/clip_frac", "grpo/ratio/log_abs_max"),
               plots_tokens.draw_ratio, captions.ratio),
    FigureSpec("tokens", "Response length and live tokens",
               ("grpo/tokens/response_length_mean", "grpo/tokens/live_fraction"),
               plots_tokens.draw_tokens, captions.tokens),
    FigureSpec("sampling", "Dynamic sampling ledger",
               ("grpo/sampling/responses_per_retained_group", "grpo/sampling/retention_rate"),
               plots.draw_sampling, captions.sampling),
)

#: The sequence ratio, after the others: drawn for runs whose loss clips it (settings
#: ``importance_sampling_level="sequence"``, or ``loss_mode="gspo"``), without a "no data" note otherwise.
_SEQ_RATIO = FigureSpec("seq_ratio", "Sequence ratio and its clip band",
                        ("grpo/seq_ratio/mean", "grpo/seq_ratio/min", "grpo/seq_ratio/max", "grpo/seq_ratio/clip_frac"),
                        plots_offpolicy.draw_seq_ratio, plots_offpolicy.seq_ratio_caption, note=False)


def _page(drawn: tuple[FigureSpec, ...]) -> tuple[FigureSpec, ...]:
    """The drawn figures with each declared one after the figure it names (in declaration order)."""
    page = list(drawn)
    for spec in DECLARED_FIGURES:
        names = [f.name for f in page]
        if spec.after not in names:
            raise ValueError(f"figure {spec.name!r} follows {spec.after!r}, which is not a figure; one of {names}")
        page.insert(names.index(spec.after) + 1, report_spec(spec))
    return tuple(page)


#: Every figure, in page order.
PAGE: tuple[FigureSpec, ...] = _page((*_DRAWN, _SEQ_RATIO))
#: Figures of asynchronous and MoE runs (docs/async_moe.md): drawn when the run logged them, and, unlike the
#: others, without a "no data" note when it did not (most runs are neither): the rows' ages and a stale drop's
#: bias (the off-policy family's ``offpolicy``), the sequence ratio, MoE routing (the MoE family's ``routing``).
OFFPOLICY_FIGURES: tuple[FigureSpec, ...] = tuple(f for f in PAGE if not f.note)
#: The figures a run that lacks them gets a note about (every one but those of families only some trainers have).
FIGURES: tuple[FigureSpec, ...] = tuple(f for f in PAGE if f.note)


def how_to_log(spec: FigureSpec, integration: str = "api", settings: dict | None = None) -> str:
    """What a run from ``integration`` does to get the figure's principal key (:func:`.notes.advice`).

    >>> how_to_log(next(f for f in FIGURES if f.name == "kl"))
    'logged when you call observe_loss with logprobs, ref_logprobs'
    """
    return advice(spec.keys[0], integration, settings or {})
