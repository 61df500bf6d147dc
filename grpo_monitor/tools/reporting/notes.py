"""What to set to get a metric family the run did not log, per integration: one table, keyed by family and integration.

A figure the run has no data for gets a note: "<title>: no data in this run (<what to do>)".
What to do depends on where the run came from (``RunData.integration``, from the run
record): a user of the plain API calls ``observe_loss`` with ``ref_logprobs``; a TRL user
never calls it and sets ``beta > 0`` instead. :data:`NO_DATA` holds the advice per
(family, integration); a family is a metric key or a key prefix (``"grpo/kl/"``), matched
against the figure's principal key, the longest match winning. The plain API's and the
scan's rows are here; each integration's are its own (``INTEGRATION.advice`` in its module),
read by name through :mod:`grpo_monitor.integrations`' registry when a report first needs them.
A new family (or a new figure) adds its rows there and gets its notes in every report; without a
row the note falls back to the metric catalogue (which call logs the key) for the plain API, and
to :data:`NOT_OBSERVED` for an integration.

>>> advice("grpo/kl/k1_mean", "trl", {"beta": 0.0})
'set beta > 0 in GRPOConfig (this run: beta = 0.0); TRL then computes the reference log-probs the KL estimators need'
>>> advice("grpo/kl/k1_mean", "api", {})
'logged when you call observe_loss with logprobs, ref_logprobs'
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

#: Where the integrations' registry lives (imported by name when a report first needs it: no import-time edge).
_INTEGRATIONS_PACKAGE = "grpo_monitor.integrations"


def _registry() -> Any:
    return importlib.import_module(_INTEGRATIONS_PACKAGE)


#: The registered integrations' names (:data:`grpo_monitor.integrations.REGISTRY`), in its order.
REGISTERED: tuple[str, ...] = tuple(_registry().REGISTRY)
#: Integration name (the run record's) -> how the notes name it: the plain API, the registry's, the scan.
INTEGRATIONS: dict[str, str] = {"api": "the plain API", **_registry().REGISTRY, "scan": "grpo-monitor scan"}

_SCAN_NO_LOGPROBS = "a scan sees the recorded rewards (and advantages), not log-probs"
#: The report's own rows: (family, integration) -> what to do, ``{setting}`` filled from the run record's settings.
_OWN: dict[tuple[str, str], str] = {
    # grpo-monitor scan (a finished run's recorded rollouts)
    ("grpo/kl/", "scan"): _SCAN_NO_LOGPROBS,
    ("grpo/ratio/", "scan"): _SCAN_NO_LOGPROBS,
    ("grpo/tokens/", "scan"): "a scan sees no token masks",
    ("grpo/mismatch/", "scan"): _SCAN_NO_LOGPROBS,
    ("grpo/entropy/", "scan"): "a scan sees the recorded rewards (and advantages), not entropies",
    ("grpo/weights/", "scan"): "a scan sees the recorded rewards (and advantages), not the loss or its token weights",
    ("grpo/adv/", "scan"): "record the advantages beside the rewards (a column the scan reads) to check them",
    ("grpo/sampling/responses_per_retained_group", "scan"): "a scan sees the trained groups only",
    ("grpo/groups/overdispersion", "scan"): "needs a prompt or question column and 0/1 rewards",
    # Captions that say what a drawn figure lacks (the iid prediction, the truncation line), for the plain API.
    ("grpo/groups/degenerate_rate_iid", "api"): "the monitor makes one when observe_rollout gets question_ids and "
                                                "every reward is 0 or 1",
    ("grpo/rows/truncated_rate", "api"): "observe_rollout logs it with truncated= (or lengths= and "
                                         "MonitorConfig(max_response_length=...))",
    ("grpo/rows/truncated_rate", "scan"): "a scan reads it from the trainer's own logged metrics (TRL "
                                          "completions/clipped_ratio, verl response_length/clip_ratio): pass "
                                          "--metrics with the run's W&B run, TensorBoard events or verl's file log",
}


def _rows(integration: str, own: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """``own`` (family -> text) keyed by ``(family, integration)``; the iid prediction needs what overdispersion needs
    (question ids and 0/1 rewards): the same advice, unless a row of its own says otherwise."""
    rows = {(family, integration): text for family, text in own.items()}
    if "grpo/groups/overdispersion" in own:
        rows.setdefault(("grpo/groups/degenerate_rate_iid", integration), own["grpo/groups/overdispersion"])
    return rows


class AdviceTable(Mapping[tuple[str, str], str]):
    """:data:`NO_DATA`: the report's own rows, and each registered integration's, read from its module the first time
    a note for that integration is asked for (iterating the whole table reads them all)."""

    def __init__(self, own: Mapping[tuple[str, str], str]):
        self._rows: dict[tuple[str, str], str] = {}
        for integration in dict.fromkeys(i for _, i in own):
            self._rows.update(_rows(integration, {f: t for (f, i), t in own.items() if i == integration}))
        self._loaded: set[str] = set()

    def of(self, integration: str) -> dict[str, str]:
        """``integration``'s rows, family -> text."""
        self._load(integration)
        return {family: text for (family, i), text in self._rows.items() if i == integration}

    def _load(self, integration: str) -> None:
        if integration in self._loaded or integration not in _registry().REGISTRY:
            return
        self._loaded.add(integration)
        self._rows.update(_rows(integration, _registry().integration(integration).advice))

    def __getitem__(self, key: tuple[str, str]) -> str:
        self._load(key[1])
        return self._rows[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for integration in _registry().REGISTRY:
            self._load(integration)
        return iter(dict(self._rows))

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: (family, integration) -> what to do, with ``{setting}`` fields filled from the run record's settings.
NO_DATA = AdviceTable(_OWN)

#: An integration's fallback for a family without a row: it should have logged it, and did not.
NOT_OBSERVED = ("the {who} integration logs it at every step it observes; none was observed in this run "
                "(attach before training starts)")


#: Why some steps of a plain-API run logged no rollout; an integration's reason is its ``INTEGRATION.rollout_gaps``.
API_ROLLOUT_GAPS = "the other steps ended (end_step) without an observe_rollout call"


def rollout_gaps(integration: str, settings: Mapping[str, Any]) -> str:
    """Why a run from ``integration`` has steps without a rollout (a generation reused, or no call).

    >>> rollout_gaps("trl", {"num_iterations": 2})
    'TRL trains on each generation for several optimizer steps when num_iterations > 1 or steps_per_generation is \
above gradient_accumulation_steps (this run: num_iterations = 2)'
    """
    text = API_ROLLOUT_GAPS if integration == "api" else None
    if integration in _registry().REGISTRY:
        text = _registry().integration(integration).rollout_gaps
    text = text or "the {who} integration observed no rollout at the other steps"
    return _fill(text, INTEGRATIONS.get(integration, integration), settings)


def advice(key: str, integration: str, settings: Mapping[str, Any]) -> str:
    """What a run from ``integration`` should do to log ``key``'s family (see the module docstring)."""
    rows = NO_DATA.of(integration)
    family = max((f for f in rows if key.startswith(f)), key=len, default=None)
    who = INTEGRATIONS.get(integration, integration)
    if family is not None:
        return _fill(rows[family], who, settings)
    if integration in ("api", "hf") or integration not in INTEGRATIONS:
        return f"logged when you {_catalogue_call(key)}"
    return _fill(NOT_OBSERVED, who, settings)


def _fill(text: str, who: str, settings: Mapping[str, Any]) -> str:
    """``text`` with ``{who}`` and the run's settings filled in; in a ``(this run: x = {x}, y = {y})`` aside, a
    setting the run record lacks is left out (the aside too when it lacks them all).

    >>> _fill("set x (this run: x = {x}, y = {y})", "TRL", {"y": 2})
    'set x (this run: y = 2)'
    """
    import re
    import string

    def aside(match: re.Match) -> str:
        known = [part for part in match.group(1).split(", ")
                 if all(name in settings for name in re.findall(r"\{(\w+)\}", part))]
        return f" (this run: {', '.join(known)})" if known else ""

    text = re.sub(r" \(this run: ([^()]*)\)", aside, text)
    names = {name for _, name, _, _ in string.Formatter().parse(text) if name and name != "who"}
    return text.format_map({**{n: settings.get(n) for n in names}, "who": who})


def _catalogue_call(key: str) -> str:
    """Which call (and which of its arguments) logs ``key``, from the metric catalogue."""
    from ...catalog.metrics import METRICS

    entry = METRICS.get(key)
    if entry is None:
        return f"log {key}"
    return f"call {entry.source}" + (f" with {entry.needs}" if entry.needs else "")
