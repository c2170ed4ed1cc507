"""The registries: a name is taken once, entries are of the registry's kind, plugins cannot shadow
built-ins, and every built-in entry loads and passes its kind's check."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from tts.registry import (
    BACKENDS,
    BENCHMARKS,
    ROLES,
    STRATEGIES,
    VERIFIERS,
    Registry,
    RegistryError,
)
from tts.search.sampling.self_consistency import SelfConsistency


@pytest.mark.parametrize("registry", [STRATEGIES, VERIFIERS, ROLES, BACKENDS, BENCHMARKS], ids=lambda r: r.kind)
def test_every_built_in_entry_loads_as_its_kind(registry):
    for name in registry.names():
        registry._check_kind(name, registry.load(name))


def test_registering_a_taken_name_is_an_error_not_an_overwrite():
    with pytest.raises(RegistryError, match="'self_consistency' is taken.*replace=True"):
        STRATEGIES.register("self_consistency", SelfConsistency)
    assert STRATEGIES.load("self_consistency") is SelfConsistency


def test_replace_true_replaces_on_purpose():
    registry = Registry("strategy", {"vote": "tts.search.sampling.self_consistency:SelfConsistency"},
                        base="tts.search.base:Strategy")

    class MyVote(SelfConsistency):
        pass

    registry.register("vote", MyVote, replace=True)
    assert registry.load("vote") is MyVote


def test_an_object_of_another_kind_is_refused_with_the_base_it_needs():
    with pytest.raises(RegistryError, match="not a subclass of tts.search.base.Strategy"):
        STRATEGIES.register("not_a_strategy", type("PluginVote", (), {"pool_rule": "vote"}))
    assert "not_a_strategy" not in STRATEGIES.names()
    with pytest.raises(RegistryError, match="lacks from_config, score"):
        VERIFIERS.register("half_a_verifier", type("Half", (), {"config_class": None}))


def test_a_lazy_entry_of_the_wrong_kind_is_refused_when_loaded():
    registry = Registry("strategy", {"odd": "tts.types:Sample"}, base="tts.search.base:Strategy")
    with pytest.raises(RegistryError, match="'odd'"):
        registry.load("odd")


def test_a_plugin_named_like_a_built_in_is_an_error_naming_the_group(monkeypatch):
    plugin = EntryPoint("self_consistency", "my_pkg.vote:MyVote", "tts.strategy")
    monkeypatch.setattr("tts.registry.entry_points", lambda group: [plugin] if group == "tts.strategy" else [])
    registry = Registry("strategy", {"self_consistency": "tts.search.sampling.self_consistency:SelfConsistency"})
    with pytest.raises(RegistryError, match="Rename the plugin's entry point in group 'tts.strategy'"):
        registry.names()


def test_a_plugin_with_a_new_name_is_listed_and_loads_lazily(monkeypatch):
    plugin = EntryPoint("my_vote", "tts.search.sampling.self_consistency:SelfConsistency", "tts.strategy")
    monkeypatch.setattr("tts.registry.entry_points", lambda group: [plugin] if group == "tts.strategy" else [])
    registry = Registry("strategy", {}, base="tts.search.base:Strategy")
    assert registry.names() == ["my_vote"] and registry.load("my_vote") is SelfConsistency


def test_threads_that_ask_while_the_plugins_load_all_see_them(monkeypatch):
    # The server solves requests on a thread pool: threads that reach a registry while another is
    # still reading the entry points (slow: it scans every installed package) must wait for the
    # plugins, not find a registry that says they are loaded and lacks them.
    import threading
    import time

    plugin = EntryPoint("my_vote", "tts.search.sampling.self_consistency:SelfConsistency", "tts.strategy")
    calls = []

    def slow_entry_points(group):
        calls.append(group)
        time.sleep(0.2)
        return [plugin] if group == "tts.strategy" else []

    monkeypatch.setattr("tts.registry.entry_points", slow_entry_points)
    registry = Registry("strategy", {}, base="tts.search.base:Strategy")
    start, errors, loaded = threading.Barrier(8), [], []

    def ask():
        start.wait()
        try:
            loaded.append(registry.load("my_vote"))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever a thread met
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and loaded == [SelfConsistency] * 8
    assert calls == ["tts.strategy"]  # the entry points were read once


def test_a_plugin_collision_is_raised_every_time_not_only_the_first(monkeypatch):
    plugin = EntryPoint("self_consistency", "my_pkg.vote:MyVote", "tts.strategy")
    monkeypatch.setattr("tts.registry.entry_points", lambda group: [plugin] if group == "tts.strategy" else [])
    registry = Registry("strategy", {"self_consistency": "tts.search.sampling.self_consistency:SelfConsistency"})
    for _ in range(2):  # the registry is not "loaded" after a failed load
        with pytest.raises(RegistryError, match="Rename the plugin's entry point"):
            registry.names()
