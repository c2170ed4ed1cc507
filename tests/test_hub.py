"""``tts.hub``: a hub that cannot be asked costs one quick request, not five logged retries, and a
cached copy is then read without any request."""

from __future__ import annotations

import logging
import socket

import pytest

from tts.benchmarks.datasets import MATH500, DatasetError


@pytest.fixture
def unreachable_hub(monkeypatch):
    """Offline mode off, the hub's endpoint a local port nobody listens on (refused at once)."""
    import datasets.config
    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_hub_reads_the_cached_copy_without_a_request(unreachable_hub, monkeypatch, caplog):
    import datasets
    import datasets.config
    from huggingface_hub import constants

    seen = []

    def cached_copy(path, name=None, split=None):  # stands for datasets reading its cache
        seen.append((path, split, constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE))
        return [{"problem": "1+1?", "answer": "2", "unique_id": "a"}, {"problem": "2+2?", "answer": "4", "unique_id": "b"}]

    monkeypatch.setattr(datasets, "load_dataset", cached_copy)
    with caplog.at_level(logging.WARNING):
        problems = MATH500().load(limit=2)
    assert [p.id for p in problems] == ["a", "b"]
    assert seen == [("HuggingFaceH4/MATH-500", "test", True, True)]  # read as in offline mode: no retries
    assert (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == (False, False)  # restored after
    assert f"math500: the hub ({unreachable_hub}) cannot be reached from this machine; using the cached copy of " \
           "HuggingFaceH4/MATH-500" in caplog.text


def test_an_unreachable_hub_without_a_cached_copy_names_the_dataset_cause_and_fix(unreachable_hub, monkeypatch):
    import datasets

    def not_cached(path, name=None, split=None):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", not_cached)
    with pytest.raises(DatasetError) as err:
        MATH500().load(limit=2)
    message = str(err.value)
    assert message.startswith(f"cannot load the math500 benchmark (HuggingFaceH4/MATH-500 on the Hugging Face hub): "
                              f"the hub ({unreachable_hub}) cannot be reached from this machine, and no copy is in "
                              "the cache;")
    assert "--data PATH" in message and "\n" not in message
