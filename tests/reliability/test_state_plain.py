"""state_dict() holds plain Python values whatever ids the user passed: JSON and weights_only checkpoints take it."""

from __future__ import annotations

import io
import json

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_monitor import GRPOMonitor, MonitorConfig
from references import advantages

G = 4
ID_KINDS = {
    "np.int64": lambda i: np.int64(i),
    "np.int32": lambda i: np.int32(i),
    "np.str_": lambda i: np.str_(f"q{i}"),
    "np.float64": lambda i: np.float64(i) + 0.5,
    "torch-scalar": lambda i: torch.tensor(i),
    "int": lambda i: i,
    "str": lambda i: f"q{i}",
    "tuple-of-numpy": lambda i: (np.int64(i), np.str_("x")),
}

_PLAIN = (str, int, float, bool, type(None))


def _assert_plain(value, where="state") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _assert_plain(k, f"{where} key")
            _assert_plain(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _assert_plain(v, f"{where}[{i}]")
    else:
        assert type(value) in _PLAIN, f"{where} is {type(value).__name__}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(sorted(ID_KINDS)), min_size=1, max_size=3),
       seed=st.integers(0, 2**16), steps=st.integers(1, 3))
def test_state_dict_is_plain_json_and_weights_only(kinds, seed, steps):
    """Any mix of numpy/torch/plain ids: state_dict() is plain, round-trips through json.dumps and
    torch.load(weights_only=True), and a restored monitor reports exactly as the original."""
    gen = torch.Generator().manual_seed(seed)
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"))
    twin = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"))
    for _step in range(steps):
        for kind in kinds:
            r = torch.randint(0, 2, (3, G), generator=gen).float()
            a = advantages(r, "population", 1e-6)
            ids = [ID_KINDS[kind](i) for i in range(3)]
            mon.observe_generation(r, question_ids=ids)
            mon.observe_rollout(r, advantages=a, question_ids=ids)
        mon.end_step()
    state = mon.state_dict()
    _assert_plain(state)
    json.dumps(state)
    buf = io.BytesIO()
    torch.save({"model": torch.zeros(1), "grpo_monitor": state}, buf)
    buf.seek(0)
    restored = torch.load(buf, weights_only=True)["grpo_monitor"]
    twin.load_state_dict(restored)
    assert twin.state_dict() == state
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    for m in (mon, twin):
        m.observe_rollout(r, advantages=(r - 0.5) / 0.5, question_ids=[ID_KINDS[kinds[0]](0)])
    assert twin.end_step().metrics == mon.end_step().metrics
