"""The metric catalogue: every key a real run emits is in it, no entry is dead, the docs are generated from it."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.docs import DOCS_PATH, render_markdown
from grpo_monitor.catalog.docs import main as docs_main
from grpo_monitor.catalog.metrics import KINDS, METRICS, SECTIONS, SOURCES, STEP_KEY, section_of, summary_for
from grpo_monitor.report import StepReport
from grpo_monitor.sinks.jsonl import read_jsonl
from grpo_monitor.sinks.layout import COMBINED_CHARTS, KNOWN_KEYS
from grpo_monitor.tools.demo import BUGS, DemoConfig, run_demo
from grpo_monitor.violations import INVARIANTS
from references import advantages

ROOT = Path(__file__).resolve().parent.parent
G = 4
_KIND_OF_FIELD = {"metrics": "scalar", "histograms": "histogram", "tables": "table"}


def _emitted(reports) -> set[tuple[str, str]]:
    """(kind, key) of everything in StepReports or JSONL records (which hold no tables)."""
    fields = [r if isinstance(r, dict) else vars(r) for r in reports]
    return {(kind, key) for r in fields for field, kind in _KIND_OF_FIELD.items() for key in r.get(field) or {}}


def _uncatalogued(emitted: set[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((kind, key) for kind, key in emitted if key not in METRICS or METRICS[key].kind != kind)


# ------------------------------------------------------------------------------ real runs
def _full_step(mon: GRPOMonitor, gen: torch.Generator, step: int) -> StepReport:
    """Two generation rounds (dynamic sampling), the retained rollout and every token tensor."""
    rounds = [(torch.rand(6, G, generator=gen) < 0.5).float() for _ in range(2)]
    qids = [[f"q{(6 * (2 * step + i) + j) % 10}" for j in range(6)] for i in range(2)]
    for rewards, q in zip(rounds, qids, strict=True):
        mon.observe_generation(rewards, question_ids=q, lengths=torch.randint(1, 9, (6 * G,), generator=gen),
                               dropped=torch.arange(6 * G) % 4 == 0)
    rewards, q = torch.cat(rounds)[:8], (qids[0] + qids[1])[:8]
    adv = advantages(rewards, "population", 1e-4)
    lengths = torch.randint(1, 9, (8 * G,), generator=gen)
    mon.observe_rollout(rewards, advantages=adv, question_ids=q, lengths=lengths, truncated=lengths == 8,
                        policy_version=torch.arange(8 * G) % 5, trained_version=step + 4)
    mask = (torch.rand(8 * G, 5, generator=gen) < 0.8).float()
    logprobs = (-torch.rand(8 * G, 5, generator=gen)).requires_grad_(True)
    ref = logprobs.detach() + 0.05 * torch.randn(8 * G, 5, generator=gen)
    u = ref - logprobs.detach()
    tok_adv = adv.reshape(-1, 1).expand(-1, 5)
    loss = -(tok_adv * logprobs * mask).sum() / mask.sum()  # measured token weights: the grpo/weights/ keys
    routed = torch.randint(0, 6, (8 * G, 5, 3, 1), generator=gen)  # MoE routing: 3 layers, top-1 of 6 experts
    mon.observe_loss(mask=mask, advantages=tok_adv, logprobs=logprobs,
                     ref_logprobs=ref, old_logprobs=logprobs.detach() + 0.01, kl=u.exp() - u - 1, loss=loss,
                     sampler_logprobs=logprobs.detach() + 0.01 + 0.01 * torch.randn(8 * G, 5, generator=gen),
                     entropy=torch.rand(8 * G, 5, generator=gen), is_weights=torch.rand(8 * G, 5, generator=gen) + 0.5,
                     routed_experts=routed,
                     sampler_routed_experts=torch.where(torch.rand(8 * G, 5, 3, 1, generator=gen) < 0.2, -1, routed))
    return mon.end_step()


@pytest.fixture(scope="module")
def full_run() -> list[StepReport]:
    """Six steps with every input of every observe call; per-question table every second step."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, table_every=2, strict=True))
    gen = torch.Generator().manual_seed(0)
    return [_full_step(mon, gen, step) for step in range(6)]


def _breaches(mon: GRPOMonitor) -> None:
    """One step per invariant, each breaking it (convention: population, then Bessel)."""
    r = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 1, 1, 1]])
    z = advantages(r, "population", 1e-4)
    inf, nan = z.clone(), r.clone()
    inf[0, 0], nan[0, 0] = float("inf"), float("nan")
    swapped, lifted = z.clone(), z.clone()
    swapped[1] = swapped[1][[0, 2, 1, 3]] * torch.tensor([1.0, 2, 1, 2])
    swapped[1] -= swapped[1].mean()
    lifted[3] = torch.tensor([0.5, -0.5, 0.5, -0.5])
    flat = torch.tensor([1.0, 0, 1, 0, 1, 0, 1])
    rollouts = [dict(rewards=r, advantages=inf), dict(rewards=nan, advantages=z), dict(rewards=r, advantages=r),
                dict(rewards=flat, group_ids=torch.tensor([0, 0, 0, 0, 1, 1, 1]), advantages=flat - 0.5),
                dict(rewards=r, advantages=swapped), dict(rewards=r, advantages=lifted),
                dict(rewards=r, advantages=z), dict(rewards=r, advantages=advantages(r, "bessel", 1e-4))]
    mask, lp = torch.ones(2, 3), -torch.ones(2, 3)
    broken_lp = lp.clone()
    broken_lp[0, 0] = float("nan")
    losses = [dict(mask=mask, advantages=torch.tensor([[1.0, 2, 3], [1, 1, 1]])),
              dict(mask=torch.tensor([[1.0, 0.5, 0], [1, 1, 1]])), dict(mask=mask, logprobs=broken_lp),
              dict(mask=mask, logprobs=lp, old_logprobs=lp - 0.5),
              dict(mask=mask, old_logprobs=lp, sampler_logprobs=lp - 2)]
    for kwargs in rollouts:
        mon.observe_rollout(kwargs.pop("rewards"), **kwargs)
        yield mon.end_step()
    for kwargs in losses:
        mon.observe_loss(**kwargs)
        yield mon.end_step()


@pytest.fixture(scope="module")
def breach_run() -> list[StepReport]:
    """Every invariant broken once under on_violation="warn" (the run goes on and reports each)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn", expect_on_policy=True))
    passk = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn", std_convention="verl.grpo_passk"))
    weights = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn", loss_aggregation="token_mean"))
    r = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reports = list(_breaches(mon))
        passk.observe_rollout(r, advantages=advantages(r, "bessel", 1e-6))  # pass@k crediting every row
        mask, lp = torch.tensor([[1.0, 1, 0], [1, 1, 1]]), torch.zeros(2, 3, requires_grad=True)
        seq_mean = -((torch.tensor([[1.0], [-1.0]]) * lp * mask).sum(-1) / mask.sum(-1)).mean()
        weights.observe_loss(mask=mask, advantages=torch.tensor([1.0, -1.0]), logprobs=lp, loss=seq_mean)
        unknown = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn"))
        r3 = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1]])
        scale = torch.tensor([[1.0], [2.0], [3.0]])  # one positive scale per group, no rule: an unknown estimator
        unknown.observe_rollout(r3, advantages=scale * (r3 - r3.mean(1, keepdim=True)))
        audited = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn"))  # a trainer's dashboard off
        audited.observe_rollout(r, advantages=advantages(r, "population", 1e-4))
        audited.audit_trainer_metrics("TRL", {"frac_reward_zero_std": 0.5})  # exact: 0.0
        return reports + [passk.end_step(), weights.end_step(), unknown.end_step(),  # weights: a row mean as
                          audited.end_step()]  # token_mean


def _demo(tmp_path_factory, name: str, bug: str | None = None, **config) -> list[dict]:
    out = tmp_path_factory.mktemp(name)
    torch.set_num_threads(1)
    run_demo(DemoConfig(steps=12, **config), out, bug=bug, wandb=False, tensorboard=False, progress=False, report=False)
    return read_jsonl(out / "monitor.jsonl")  # what the sinks received, the failing step's report included


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory) -> dict[str, list[dict]]:
    """The teaching demo: plain, with dynamic sampling, and with every injected bug (each ends at its breach)."""
    threads = torch.get_num_threads()
    runs = {"plain": _demo(tmp_path_factory, "plain"), "dynamic": _demo(tmp_path_factory, "dyn", dynamic_sampling=True)}
    runs.update({bug: _demo(tmp_path_factory, bug, bug=bug) for bug in BUGS})
    torch.set_num_threads(threads)
    return runs


def test_every_key_of_a_full_run_is_catalogued(full_run):
    """A run with every observe input emits catalogued keys only, each of its catalogued kind."""
    assert _uncatalogued(_emitted(full_run)) == []
    assert any(r.tables for r in full_run) and any("grpo/groups/degenerate_rate_iid" in r.metrics for r in full_run)
    assert all(r.convention is None or "grpo/convention" in METRICS for r in full_run)


def test_every_breach_is_catalogued(breach_run):
    """Under "warn", each invariant's count appears once it breaks, and every key is catalogued."""
    emitted = _emitted(breach_run)
    assert _uncatalogued(emitted) == []
    assert {f"grpo/invariants/{name}" for name in INVARIANTS} <= {key for _, key in emitted}
    from grpo_monitor.sinks.tensorboard_sink import VIOLATIONS_TAG

    assert METRICS[VIOLATIONS_TAG].kind == "text"  # the TensorBoard text of the breaches


def test_demo_runs_emit_only_catalogued_keys(demo_runs):
    """The demo's JSONL logs, healthy or ended by each injected bug, hold catalogued keys only."""
    for name, records in demo_runs.items():
        assert records, name
        assert _uncatalogued(_emitted(records)) == [], name


def test_no_entry_is_dead(full_run, breach_run, demo_runs):
    """Every non-integration entry is emitted by one of the runs, unless it says when it can be absent."""
    emitted = {key for _, key in _emitted(full_run + breach_run + [r for rs in demo_runs.values() for r in rs])}
    emitted |= {"grpo/convention", "grpo/violations", "grpo/config"}  # sink-side texts: report.convention,
    # report.violations, and the run config each sink writes once (Sink.log_config)
    dead = [k for k, m in METRICS.items() if k not in emitted and m.source != "integration" and not m.only_when]
    assert dead == []


# ------------------------------------------------------------------------------ every literal in the source
_KEY = re.compile(r"grpo/[a-z0-9_]+(?:/[a-z0-9_]+)*")


def _key_literals(path: Path) -> list[str]:
    """``grpo/...`` string literals, and f-strings as globs (``f"grpo/kl/{k}_mean"`` -> ``grpo/kl/*_mean``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fstrings = [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    parts = {id(v) for n in fstrings for v in n.values}
    out = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in parts
           and isinstance(n.value, str) and _KEY.fullmatch(n.value)]
    for node in fstrings:
        glob = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
        if glob.startswith("grpo/") and " " not in glob:
            out.append(glob)
    return out


def test_every_key_literal_in_the_source_is_catalogued():
    """Code paths no test runs (integrations, sinks, plots) name only catalogued keys."""
    files = sorted((ROOT / "grpo_monitor").rglob("*.py")) + sorted((ROOT / "integrations").glob("*.py"))
    missing = [(str(f.relative_to(ROOT)), lit) for f in files for lit in _key_literals(f)
               if lit != STEP_KEY and not any(fnmatch.fnmatchcase(k, lit) for k in METRICS)]
    assert missing == []


def test_key_literal_scan_reads_fstrings(tmp_path):
    """The scan sees plain keys and f-string families, and skips prose and prefixes."""
    src = tmp_path / "m.py"
    src.write_text('"""grpo/in a docstring."""\na = "grpo/adv/mean"\nb = f"grpo/kl/{k}_max"\nc = "grpo/kl/"\n')
    assert _key_literals(src) == ["grpo/adv/mean", "grpo/kl/*_max"]


# ------------------------------------------------------------------------------ the catalogue itself
def test_entries_are_complete_and_consistent():
    """Each entry has a known kind, source and section, a meaning sentence, a unit and an aggregation."""
    names = [name for name, _ in SECTIONS]
    for key, m in METRICS.items():
        assert m.key == key and m.kind in KINDS and m.source in SOURCES and m.section in names, key
        assert m.meaning[:1].isupper() and m.meaning.endswith("."), key
        assert m.unit and m.aggregation and m.over_steps and m.summary in ("last", "max"), key
        prefix_section = next((s for s, prefixes in SECTIONS if key.startswith(prefixes)), None)
        assert prefix_section == m.section == section_of(key), key
    assert [METRICS[k].section for k in METRICS] == sorted((m.section for m in METRICS.values()), key=names.index)


def test_invariant_counts_derive_from_the_registry():
    """One count per invariant of INVARIANTS, with its statement, kept as a max in run summaries."""
    counts = {k for k in METRICS if k.startswith("grpo/invariants/")} - {"grpo/invariants/violations"}
    assert counts == {f"grpo/invariants/{name}" for name in INVARIANTS}
    for name, statement in INVARIANTS.items():
        assert str(statement) in METRICS[f"grpo/invariants/{name}"].meaning
        assert summary_for(f"grpo/invariants/{name}") == "max"
    assert summary_for("grpo/invariants/not_yet_catalogued") == "max" and summary_for("grpo/adv/mean") == "last"


def test_known_keys_and_combined_charts_derive_from_the_catalogue():
    """KNOWN_KEYS are the catalogued scalars; each combined chart holds scalars of one section."""
    assert KNOWN_KEYS == tuple(k for k, m in METRICS.items() if m.kind == "scalar")
    titles = {title: keys for _, title, keys in COMBINED_CHARTS}
    assert titles["degenerate rate: observed vs iid-predicted"] == (
        "grpo/groups/degenerate_rate", "grpo/groups/degenerate_rate_iid")
    assert titles["KL estimators: mean"] == ("grpo/kl/k1_mean", "grpo/kl/k2_mean", "grpo/kl/k3_mean")
    for section, title, keys in COMBINED_CHARTS:
        assert len(keys) > 1 and {METRICS[k].section for k in keys} == {section}, title


def test_add_metrics_refuses_every_monitor_key():
    """Every key the monitor writes itself lies in a section add_metrics refuses to users."""
    from grpo_monitor.catalog.metrics import MONITOR_SECTIONS
    from grpo_monitor.step.inputs import scalars  # add_metrics' check

    assert scalars.MONITOR_SECTIONS is MONITOR_SECTIONS  # derived from the catalogue, not kept twice
    own = [k for k, m in METRICS.items() if m.source != "integration" and m.key.count("/") >= 2]
    assert [k for k in own if k.split("/")[1] not in MONITOR_SECTIONS] == []
    assert {"trl", "verl", "hf"}.isdisjoint(MONITOR_SECTIONS)  # the integrations' sections stay open to them


def test_lazy_export_without_torch():
    """grpo_monitor.METRICS is the catalogue, and reading it imports no torch (the CLI starts at once)."""
    import grpo_monitor

    assert grpo_monitor.METRICS is METRICS and "METRICS" in grpo_monitor.__all__
    code = "import sys, grpo_monitor; grpo_monitor.METRICS; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ------------------------------------------------------------------------------ generated docs
def test_docs_are_generated_from_the_catalogue():
    """The committed docs/metrics.md is the generator's output (regenerate: python -m grpo_monitor.catalog)."""
    assert (ROOT / DOCS_PATH).read_text(encoding="utf-8") == render_markdown()


def test_docs_list_every_key_once_per_section():
    """One table per section in display order; every key is a row of its section's table."""
    text = render_markdown()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == [name for name, _ in SECTIONS if any(m.section == name for m in METRICS.values())]
    rows = re.findall(r"^\| `([^`]+)`", text, flags=re.M)
    assert rows == list(METRICS)
    assert "\\|advantage\\|" in text  # pipes in meanings are escaped


def test_docs_generator_writes_and_checks(tmp_path, capsys):
    """The generator writes docs/metrics.md under --root; --check exits 1 on a stale file, 0 on a fresh one."""
    assert docs_main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert docs_main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / DOCS_PATH).read_text(encoding="utf-8") == render_markdown()
    assert docs_main(["--root", str(tmp_path), "--check"]) == 0
    assert docs_main(["--check"]) == 0, "docs/metrics.md is stale: run `python -m grpo_monitor.catalog`"
