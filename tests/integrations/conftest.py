"""Fixtures of the integration tests: the tiny on-disk Llama, offline hubs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A 2-layer Llama (hidden 32) and its char-level tokenizer, saved once per session."""
    from tiny_trl import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def wandb_dir(tmp_path, monkeypatch):
    """An offline W&B sandbox in ``tmp_path``: env set, wandb's process-wide state reset before and after."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # a singleton set up by an earlier test would keep that test's directory
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield tmp_path
    wandb.finish()
    wandb.teardown()
