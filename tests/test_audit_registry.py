"""`grpo-monitor audit` on every shipped estimator and on TRL's and verl's own code: exit 0, the entry named.

Each registry entry is audited as a trainer would run it: a torch function whose float64
reference result comes back as float32. TRL's advantage block and verl's functions are
called from the installed packages (as in tests/estimators), on float32 rewards.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.tools.cli import main

SINGLE = [name for name, est in ESTIMATORS.items() if not est.multi_reward]
#: Entries whose promises hold on a reward domain the standard-normal probes leave: the audit names them and
#: calls the run broken there, as the live monitor does (skyrl.maxrl divides by the group mean).
DOMAIN = {name for name, est in ESTIMATORS.items() if est.reward_domain != "real"}

#: Every single-reward registry entry as a float32 torch function ``rewards (B, G) -> advantages (B, G)``.
WRAPPED = textwrap.dedent('''
    import numpy as np
    import torch

    from grpo_monitor.estimators import get


    def wrap(name):
        est = get(name)

        def fn(r):
            B, G = r.shape
            gid = np.repeat(np.arange(B), G)
            return torch.from_numpy(est(r.double().numpy().ravel(), gid)).float().view(B, G)

        return fn
''') + "".join(f"\n{name.replace('.', '__')} = wrap({name!r})\n" for name in SINGLE)

#: TRL's advantage block (GRPOTrainer._generate_and_score_completions) and verl's core_algos, as rewards -> advantages.
FRAMEWORKS = textwrap.dedent('''
    import functools
    import inspect
    import textwrap
    import types
    import warnings

    import numpy as np
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.trainer import grpo_trainer
        from verl.trainer.ppo import core_algos

    FIRST = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"
    LAST = "advantages = torch.nan_to_num(advantages, nan=0.0)"
    SRC = inspect.getsource(grpo_trainer.GRPOTrainer._generate_and_score_completions)
    START = SRC.rindex("\\n", 0, SRC.index(FIRST)) + 1
    BLOCK = compile(textwrap.dedent(SRC[START:SRC.index(LAST) + len(LAST)]), grpo_trainer.__file__, "exec")


    def trl(rewards, scale):
        B, G = rewards.shape
        trainer = types.SimpleNamespace(multi_objective_aggregation="sum_then_normalize", scale_rewards=scale,
                                        reward_funcs=[None], reward_weights=torch.ones(1))
        scope = dict(vars(grpo_trainer))
        scope.update(self=trainer, rewards_per_func=rewards.float().reshape(-1, 1), num_generations=G, device="cpu")
        exec(BLOCK, scope)
        return scope["advantages"].view(B, G)


    def verl(rewards, fn_name, **kwargs):
        B, G = rewards.shape  # one token per response: verl's token whitening is then row whitening
        index = np.array([f"uid-{i}" for i in range(B) for _ in range(G)], dtype=object)
        adv, _ = getattr(core_algos, fn_name)(token_level_rewards=rewards.float().reshape(-1, 1),
                                              response_mask=torch.ones(B * G, 1), index=index, **kwargs)
        return adv[:, 0].reshape(B, G)


    trl__group = functools.partial(trl, scale="group")
    trl__batch = functools.partial(trl, scale="batch")
    trl__none = functools.partial(trl, scale="none")
    verl__grpo = functools.partial(verl, fn_name="compute_grpo_outcome_advantage", norm_adv_by_std_in_grpo=True)
    verl__grpo_no_std = functools.partial(verl, fn_name="compute_grpo_outcome_advantage",
                                          norm_adv_by_std_in_grpo=False)
    verl__grpo_vectorized = functools.partial(verl, fn_name="compute_grpo_vectorized_outcome_advantage",
                                              norm_adv_by_std_in_grpo=True)
    verl__rloo = functools.partial(verl, fn_name="compute_rloo_outcome_advantage")
    verl__reinforce_plus_plus_baseline = functools.partial(
        verl, fn_name="compute_reinforce_plus_plus_baseline_outcome_advantage")
    verl__gpg = functools.partial(verl, fn_name="compute_gpg_outcome_advantage")
    verl__grpo_passk = functools.partial(verl, fn_name="compute_grpo_passk_outcome_advantage",
                                         config={"norm_adv_by_std_in_grpo": True})
''')

#: registry name -> the entry the audit must name first (None: the name itself; identical entries share one name).
REAL = {
    "trl.group": "trl.group", "trl.batch": "trl.batch", "trl.none": "none", "verl.grpo": "verl.grpo",
    "verl.grpo_no_std": "none", "verl.grpo_vectorized": "verl.grpo", "verl.rloo": "leave_one_out",
    "verl.reinforce_plus_plus_baseline": "verl.reinforce_plus_plus_baseline", "verl.gpg": "verl.gpg",
    "verl.grpo_passk": "verl.grpo_passk",
}


def _audit_json(spec: str, capsys, *args: str) -> tuple[int, dict]:
    code = main(["audit", spec, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def wrapped_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("registry") / "wrapped.py"
    path.write_text(WRAPPED)
    return path


@pytest.fixture(scope="module")
def frameworks_file(tmp_path_factory) -> Path:
    pytest.importorskip("trl.trainer.grpo_trainer")
    pytest.importorskip("verl.trainer.ppo.core_algos")
    path = tmp_path_factory.mktemp("frameworks") / "frameworks.py"
    path.write_text(FRAMEWORKS)
    return path


@pytest.mark.parametrize("name", SINGLE)
def test_every_shipped_estimator_in_float32_exits_0_and_is_named(wrapped_file, capsys, name):
    """Each registry entry, its result cast to float32, is sound (exit 0), among the entries it matches, and
    fits when expected by name."""
    code, out = _audit_json(f"{wrapped_file}:{name.replace('.', '__')}", capsys, "--expect", name)
    ok = (1, "broken", 1) if name in DOMAIN else (0, "ok", 0)
    assert (code, out["verdict"], out["exit_code"]) == ok, [
        (v["invariant"], v["probe"], v["dtype"], v["hint"]) for v in out["violations"] if v["severity"] == "error"]
    assert name in out["matches"] and out["inferred"] == out["matches"][0]
    assert out["match"]["name"] == out["inferred"] and out["match"]["text"].startswith(f"{out['inferred']}: ")
    assert (out["expected"], out["expected_fits"]) == (name, True)


@pytest.mark.parametrize("G", [2, 4, 16])
@pytest.mark.parametrize("name", ["trl.group", "verl.reinforce_plus_plus_baseline", "nemo_rl.grpo", "skyrl.maxrl"])
def test_other_group_sizes(wrapped_file, capsys, name, G):
    """The verdict holds at other group sizes (the offset probe shrinks with G to stay resolved in float32)."""
    code, out = _audit_json(f"{wrapped_file}:{name.replace('.', '__')}", capsys, "-G", str(G))
    assert (code, out["group_size"]) == (int(name in DOMAIN), G) and name in out["matches"]


@pytest.mark.parametrize("name", ["verl.grpo", "trl.group", "openrlhf.group_norm", "areal.grpo", "skyrl.maxrl"])
def test_entry_with_its_own_stabilizer_is_named_first(wrapped_file, capsys, name):
    """The fitted stabilizer picks the entry: verl.grpo (1e-6) and trl.group (1e-4) are not just "bessel"."""
    code, out = _audit_json(f"{wrapped_file}:{name.replace('.', '__')}", capsys)
    assert code == int(name in DOMAIN) and out["inferred"] == name
    eps = ESTIMATORS[name].params["eps"]
    assert out["match"]["params"]["eps"] == pytest.approx(eps, rel=1e-2)


def test_by_design_breaches_of_the_matched_entry_are_warnings(wrapped_file, capsys):
    """AReaL's reward clip breaks affinity by design: warnings naming the entry."""
    code, out = _audit_json(f"{wrapped_file}:areal__grpo", capsys)
    found = [v for v in out["violations"] if v["probe"] == "offset" and v["invariant"] == "affine_in_rewards"]
    assert code == 0 and all(v["severity"] == "warning" and "areal.grpo" in v["hint"] for v in found)
    assert not [v for v in out["violations"] if v["probe"] == "offset" and v["severity"] == "error"]


def test_outside_its_reward_domain_the_matched_entry_is_broken_and_named(wrapped_file, capsys):
    """MaxRL on negative rewards trains against the reward (slope < 0): an error, as the live monitor raises, whose
    hint names the entry and its domain; the nonnegative probes (0/1 rewards) stay clean."""
    code, out = _audit_json(f"{wrapped_file}:skyrl__maxrl", capsys)
    errors = [v for v in out["violations"] if v["severity"] == "error"]
    assert (code, out["inferred"]) == (1, "skyrl.maxrl") and errors
    assert all(v["invariant"] == "affine_in_rewards" and "skyrl.maxrl" in v["hint"] and "nonnegative" in v["hint"]
               for v in errors)
    assert not [v for v in out["violations"] if v["probe"] == "binary"]


@pytest.mark.parametrize("name", list(REAL))
def test_real_framework_code_exits_0_and_is_named(frameworks_file, capsys, name):
    """TRL's and verl's own advantage code, on float32 rewards as they run, is sound and named."""
    code, out = _audit_json(f"{frameworks_file}:{name.replace('.', '__')}", capsys)
    assert (code, out["verdict"]) == (0, "ok"), [
        (v["invariant"], v["probe"], v["dtype"], v["hint"]) for v in out["violations"] if v["severity"] == "error"]
    assert out["inferred"] == REAL[name] and name in out["matches"]


def test_real_verl_text_names_the_entry_and_its_stabilizer(frameworks_file, capsys):
    """The text verdict reads "matches verl.grpo: <formula> (eps fitted 1.0e-06)"; --expect shows both names."""
    assert main(["audit", f"{frameworks_file}:verl__grpo", "--expect", "bessel"]) == 0
    text = capsys.readouterr().out
    assert "OK: matches verl.grpo: (r - mean_g) / (torch.std_g + 1e-6)" in text and "(eps fitted 1.0e-06)" in text
    assert "expected              bessel, inferred verl.grpo: bessel reproduces it" in text
    assert main(["audit", f"{frameworks_file}:trl__group", "--expect", "verl.grpo"]) == 1
    text = capsys.readouterr().out
    assert "expected verl.grpo, inferred trl.group: another stabilizer: eps 1.0e-04 where verl.grpo uses 1e-06" in text
