"""Dashboard layout shared by the TensorBoard and W&B sinks: which panel shows which key.

Pure data and functions (no backend imports). A key's section is decided by its prefix;
a few charts put related keys on one plot (observed vs iid-predicted degenerate rate, the
three KL estimators); every other key gets a chart of its own.
"""

from __future__ import annotations

from typing import Iterable

from ..violations import INVARIANTS

#: The x axis of every panel: the monitor's step, logged with each report.
STEP_KEY = "grpo/step"

#: Sections in display order, with the key prefixes that belong to each.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Groups", ("grpo/groups/", "grpo/reward/")),
    ("Advantages", ("grpo/adv/",)),
    ("KL", ("grpo/kl/", "grpo/ratio/")),
    ("Sampling", ("grpo/sampling/",)),
    ("Invariants", ("grpo/invariants/",)),
    ("Tokens", ("grpo/tokens/",)),
)

_KL = tuple(f"grpo/kl/{k}_{s}" for s in ("mean", "std", "neg_frac", "max") for k in ("k1", "k2", "k3"))

#: Every scalar key the monitor emits (per-invariant counts included).
KNOWN_KEYS: tuple[str, ...] = (
    "grpo/groups/total",
    "grpo/groups/degenerate_rate",
    "grpo/groups/degenerate_rate_iid",
    "grpo/groups/effective_prompts",
    "grpo/groups/overdispersion",
    "grpo/reward/mean",
    "grpo/reward/question_std_mean",
    "grpo/adv/group_mean_abs_max",
    "grpo/adv/live_std_mean",
    "grpo/adv/degenerate_abs_max",
    "grpo/adv/convention_scale",
    "grpo/adv/stabilizer",
    *_KL,
    "grpo/ratio/mean",
    "grpo/ratio/log_abs_max",
    "grpo/ratio/clip_frac",
    "grpo/sampling/generation_batches",
    "grpo/sampling/generated_groups",
    "grpo/sampling/retained_groups",
    "grpo/sampling/discarded_groups",
    "grpo/sampling/retention_rate",
    "grpo/sampling/responses_per_retained_group",
    "grpo/tokens/live_fraction",
    "grpo/tokens/response_length_mean",
    "grpo/tokens/valid",
    "grpo/invariants/violations",
    *(f"grpo/invariants/{name}" for name in INVARIANTS),
)

#: Charts that plot several keys together: (section, title, keys).
COMBINED_CHARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Groups",
        "degenerate rate: observed vs iid-predicted",
        ("grpo/groups/degenerate_rate", "grpo/groups/degenerate_rate_iid"),
    ),
    *(("KL", f"KL estimators: {s}", tuple(f"grpo/kl/{k}_{s}" for k in ("k1", "k2", "k3")))
      for s in ("mean", "std", "neg_frac", "max")),
    (
        "Sampling",
        "groups: generated / retained / discarded",
        tuple(f"grpo/sampling/{k}_groups" for k in ("generated", "retained", "discarded")),
    ),
    (
        "Invariants",
        "violations per invariant",
        tuple(f"grpo/invariants/{name}" for name in INVARIANTS),
    ),
)


def section_of(key: str) -> str | None:
    """The section a key belongs to, by prefix; None for keys outside every section.

    >>> section_of("grpo/ratio/clip_frac")
    'KL'
    """
    for section, prefixes in SECTIONS:
        if key.startswith(prefixes):
            return section
    return None


def charts(keys: Iterable[str] = KNOWN_KEYS) -> dict[str, list[tuple[str, list[str]]]]:
    """Section -> [(chart title, keys)] for ``keys``, sections in display order.

    Combined charts keep the keys of theirs that are in ``keys``; every other sectioned
    key gets a chart titled by the key itself. Empty sections are left out.

    >>> charts(["grpo/groups/degenerate_rate", "grpo/adv/stabilizer"])["Advantages"]
    [('grpo/adv/stabilizer', ['grpo/adv/stabilizer'])]
    """
    wanted = [k for k in dict.fromkeys(keys) if section_of(k) is not None]
    out: dict[str, list[tuple[str, list[str]]]] = {name: [] for name, _ in SECTIONS}
    covered: set[str] = set()
    for section, title, members in COMBINED_CHARTS:
        present = [k for k in members if k in wanted]
        if present:
            out[section].append((title, present))
            covered.update(present)
    for key in wanted:
        if key not in covered:
            out[section_of(key)].append((key, [key]))
    return {name: panels for name, panels in out.items() if panels}
