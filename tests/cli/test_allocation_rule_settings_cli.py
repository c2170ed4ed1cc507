"""``--set allocation.KEY=VALUE``: the online allocator's rule settings from the command line,
one spelling on ``tts eval --allocate`` (scripted backend) and ``tts budget simulate`` (a small
pool): they reach the live policy and the replay, unknown keys and refused combinations are
usage errors naming what to change, and a run from before these settings still resumes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from tests.pool_fakes import write_contested_pool
from tts.budgets.online import OnlinePolicy
from tts.budgets.replay.simulate import SimulateConfig
from tts.cli.app import app
from tts.config import ONLINE_RULE_SETTINGS, AllocationConfig

runner = CliRunner(env={"COLUMNS": "220"})
BASE = ["eval", "--backend", "scripted", "--limit", "4", "--max-tokens", "48", "--allocate", "--budget", "3000"]


def _flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def test_every_rule_setting_is_a_field_of_the_policy_the_run_config_and_the_replay_with_one_default():
    policy = {f.name: f.default for f in dataclasses.fields(OnlinePolicy)}
    for key in ONLINE_RULE_SETTINGS:
        assert key in policy, key
        assert AllocationConfig.model_fields[key].default == policy[key], key
        assert SimulateConfig.model_fields[key].default == policy[key], key


def test_eval_allocate_passes_the_settings_to_the_live_policy(tmp_path, monkeypatch):
    from tts.budgets import online

    seen = []

    class Spy(online.OnlineAllocator):
        def __post_init__(self):
            seen.append(self.policy)
            super().__post_init__()

    monkeypatch.setattr(online, "OnlineAllocator", Spy)
    r = runner.invoke(app, [*BASE, "--chunk", "2", "--set", "allocation.rule=dirichlet",
                            "--set", "allocation.ladder=0.97/0.99", "--set", "allocation.confirm_window=3",
                            "--set", "allocation.top_k=3", "--set", "allocation.escalate=false",
                            "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    (policy,) = seen
    assert (policy.rule, policy.ladder, policy.confirm_window, policy.top_k, policy.escalate, policy.chunk) == \
        ("dirichlet", (0.97, 0.99), 3, 3, False, 2)
    rows = [json.loads(x) for x in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    assert rows[0]["allocation"]["rule"] == "dirichlet" and rows[0]["allocation"]["ladder"] == [0.97, 0.99]
    # The YAML section takes the same keys.
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {benchmark: demo, limit: 4}\nbackend: {kind: scripted}\nsampling: {max_tokens: 48}\n"
                   "allocation: {budget: 3000, rule: window, window: 3, give_up_after: 8, give_up_share: 0.5}\n")
    seen.clear()
    r = runner.invoke(app, ["eval", "--config", str(cfg), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert (seen[0].rule, seen[0].window, seen[0].give_up_after, seen[0].give_up_share) == ("window", 3, 8, 0.5)


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "allocation.windw=4"], "the online allocator has no setting 'windw'; it has: " + ", ".join(ONLINE_RULE_SETTINGS)),
    (["--set", "allocation.rule=window", "--set", "allocation.confirm_window=4"],
     "confirm_window (>= 0) confirms the posterior stop of 'horizon', 'beta' and 'dirichlet'"),
    (["--set", "allocation.rule=majority"], "allocation.rule: Input should be"),
    (["--set", "allocation.top_k=1"], "allocation.top_k: Input should be greater than or equal to 2"),
    (["--set", "allocation.ladder=0.97/high"], "write the ladder as confidences"),
    (["--allocate-mode", "offline", "--calibration", "x.jsonl", "--set", "allocation.window=4"],
     "window only applies to mode online"),
])
def test_eval_refuses_bad_rule_settings_with_what_to_change(tmp_path, extra, message):
    r = runner.invoke(app, [*BASE, *extra, "--out", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    assert message in _flat(r.output), r.output
    assert "Traceback" not in r.output and not (tmp_path / "x" / "results.jsonl").exists()


def test_rule_settings_without_allocate_are_refused(tmp_path):
    r = runner.invoke(app, ["eval", "--backend", "scripted", "--limit", "2", "--set", "allocation.window=4",
                            "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--set allocation.window only applies with --allocate" in _flat(r.output), r.output


def test_an_allocated_run_from_before_the_rule_settings_resumes(tmp_path):
    out = tmp_path / "a"
    assert runner.invoke(app, [*BASE, "--out", str(out)]).exit_code == 0
    manifest = json.loads((out / "run.json").read_text())
    for key in ("prior", "window", "length_weight", "confirm_window", "give_up_after", "give_up_share", "ladder",
                "top_k"):
        del manifest["config"]["allocation"][key]  # what run.json held before these settings existed
    (out / "run.json").write_text(json.dumps(manifest))
    r = runner.invoke(app, [*BASE, "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*BASE, "--set", "allocation.window=4", "--out", str(out)])
    assert r.exit_code == 2 and "allocation.window: 8 -> 4" in _flat(r.output), r.output


def test_help_names_every_setting():
    for command in (["eval", "--help"], ["budget", "simulate", "--help"]):
        text = _flat(runner.invoke(app, command).output)
        assert "allocation.KEY=VALUE" in text, command
        for key in ONLINE_RULE_SETTINGS:
            assert key in text, (command, key)


# --- tts budget simulate -------------------------------------------------------------------------


@pytest.fixture()
def pool_file(tmp_path):
    """30 problems x 24 samples: most easy, some with the wrong answers spread over three values."""
    return write_contested_pool(tmp_path / "pool.jsonl", samples=24, easy=20, seed=0, contested=(0.3, 0.7),
                                length=lambda p, ok: 500, spread=(0.5, 1.5))


def _simulate(pool_file, *extra):
    return runner.invoke(app, ["budget", "simulate", "--pool", str(pool_file), "--target", "self_consistency@16",
                               "--orderings", "3", "--mode", "online", "--json", *extra])


def test_simulate_passes_the_same_settings_to_the_replay(pool_file, monkeypatch):
    from tts.budgets.replay import simulate as replay

    seen = []
    real = replay.simulate
    monkeypatch.setattr(replay, "simulate", lambda pool, cfg, *a, **k: seen.append(cfg) or real(pool, cfg, *a, **k))
    r = _simulate(pool_file, "--set", "allocation.rule=dirichlet", "--set", "allocation.ladder=[0.97, 0.99]",
                  "--set", "allocation.confirm_window=4", "--set", "allocation.prior=0.5")
    assert r.exit_code == 0, r.output
    assert (seen[0].rule, seen[0].ladder, seen[0].confirm_window, seen[0].prior) == ("dirichlet", (0.97, 0.99), 4, 0.5)
    # --rule and --confidence are the same settings: given both ways they must agree.
    seen.clear()
    assert _simulate(pool_file, "--rule", "beta", "--set", "allocation.confidence=0.9").exit_code == 0
    assert (seen[0].rule, seen[0].confidence) == ("beta", 0.9)
    assert json.loads(_simulate(pool_file, "--rule", "beta").stdout) == \
        json.loads(_simulate(pool_file, "--set", "allocation.rule=beta").stdout)


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "window=4"], "write allocation.KEY=VALUE (e.g. --set allocation.window=4)"),
    (["--set", "allocation.windw=4"], "it has: " + ", ".join(ONLINE_RULE_SETTINGS)),
    (["--rule", "beta", "--set", "allocation.rule=dirichlet"], "disagree; give one"),
    (["--rule", "rate"], "the 'rate' rule needs a rate model in Python"),
    (["--set", "allocation.length_weight=1", "--set", "allocation.rule=dirichlet"], "length_weight weighs"),
])
def test_simulate_refuses_bad_rule_settings_with_what_to_change(pool_file, extra, message):
    r = _simulate(pool_file, *extra)
    assert r.exit_code == 2, r.output
    assert message in _flat(r.output), r.output
