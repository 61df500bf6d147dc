"""Fixtures of the doctor tests: the tiny on-disk Llama of the TRL tests, and the env real trainers need offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent / "integrations"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # trl_runs, tiny_trl


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A 2-layer Llama (hidden 32) and its char-level tokenizer, saved once per session (tiny_trl's builder)."""
    from tiny_trl import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-doctor"))
