"""`tts eval --strategy auto --budget B --calibration RUN`: strategy and n chosen per problem, end to end."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tts.cli.app import app

runner = CliRunner()


def _eval(*args: str):
    return runner.invoke(app, ["eval", *args])


def test_auto_runs_from_a_past_run_and_refuses_what_it_cannot_do(tmp_path):
    base = ["--backend", "scripted", "--max-tokens", "48"]
    cal = tmp_path / "cal"
    r = _eval(*base, "--limit", "12", "-s", "self_consistency", "-s", "best_of_n", "-n", "8", "--out", str(cal))
    assert r.exit_code == 0, r.output
    out = tmp_path / "auto"
    r = _eval(*base, "--limit", "6", "-s", "auto", "--budget", "6000", "--calibration", str(cal), "--out", str(out),
              "--set", "strategies=[self_consistency, best_of_n]")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert all(row["strategy"]["kind"] == "auto" and row["strategy"]["budget"] == 1000 for row in rows)
    spent = sum(row["usage"]["completion_tokens"] + row["usage"]["prompt_tokens"]
                - row["usage"]["cached_prompt_tokens"] for row in rows)
    assert spent <= 6000 * 1.05
    assert {row["trace"]["notes"]["strategy"] for row in rows} <= {"self_consistency", "best_of_n"}
    for i, (extra, message) in enumerate(((["--budget", "50"], "raise --budget to at least"),
                           (["--budget", "6000", "-n", "4"], "drop -n"),
                           (["--budget", "6000", "--set", "strategies=[beam]"], "unknown strategy 'beam'"),
                           (["--budget", "6000", "--calibration", str(tmp_path / "none")], "no such pool file"))):
        args = [*base, "--limit", "6", "-s", "auto", "--calibration", str(cal), "--out", str(tmp_path / f"x{i}"), *extra]
        r = _eval(*args)
        assert r.exit_code == 2, (extra, r.output)
        assert message in " ".join(r.output.split()), (extra, r.output)
        assert "Traceback" not in r.output


def test_auto_escalate_takes_a_search_run_and_refuses_a_run_without_one(tmp_path):
    base = ["--backend", "scripted", "--max-tokens", "48"]
    cal, search = tmp_path / "cal", tmp_path / "search"
    assert _eval(*base, "--limit", "12", "-s", "self_consistency", "-n", "8", "--out", str(cal)).exit_code == 0
    r = _eval(*base, "--limit", "12", "-s", "rebase", "-n", "2", "--out", str(search))
    assert r.exit_code == 0, r.output
    out = tmp_path / "auto"
    r = _eval(*base, "--limit", "4", "-s", "auto", "--budget", "20000", "--calibration", str(cal),
              "--escalate", str(search), "--set", "strategies=[self_consistency]", "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        notes = row["trace"]["notes"]
        assert "rebase@2" in notes["alternatives"]  # the search was an option of every problem
        assert notes["escalation"] in (None, "rebase@2")
    r = _eval(*base, "--limit", "4", "-s", "auto", "--budget", "20000", "--calibration", str(cal),
              "--escalate", str(cal), "--out", str(tmp_path / "bad"))
    assert r.exit_code == 2 and "no graded search" in r.output, r.output
    glued = f"{search};{cal}"  # two runs in one option: refused before any engine starts, saying what to pass
    r = _eval(*base, "--limit", "4", "-s", "auto", "--budget", "20000", "--calibration", str(cal),
              "--escalate", glued, "--out", str(tmp_path / "b3"))
    assert r.exit_code == 2 and "one run directory per entry" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "b3").exists()
    config = tmp_path / "auto.yaml"  # the same from a config file's escalate:, also before any engine starts
    config.write_text(f"strategies:\n  - {{kind: auto, budget: 20000, calibration: '{cal}', "
                      f"escalate: ['{tmp_path / 'nowhere'}']}}\n")
    r = _eval(*base, "--limit", "4", "--config", str(config), "--out", str(tmp_path / "b4"))
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "escalate: (in the config file)" in said and "nowhere" in said, r.output
    assert not (tmp_path / "b4").exists()
    r = _eval(*base, "--limit", "4", "-s", "self_consistency", "--escalate", str(search), "--out", str(tmp_path / "b2"))
    assert r.exit_code == 2 and "--escalate only applies with --strategy auto" in r.output, r.output


def test_auto_plans_every_problem_in_one_batch_unless_a_batch_size_is_given_also_from_a_config_file(tmp_path):
    base = ["--backend", "scripted", "--max-tokens", "48"]
    cal = tmp_path / "cal"
    assert _eval(*base, "--limit", "12", "-s", "self_consistency", "-s", "best_of_n", "-n", "8",
                 "--out", str(cal)).exit_code == 0
    for name, yaml_text, expected in (("plain", "data: {limit: 20}\n", 20), ("sized", "data: {limit: 20}\nbatch_size: 5\n", 5)):
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml_text)
        out = tmp_path / name
        r = _eval(*base, "--config", str(config), "-s", "auto", "--budget", "20000", "--calibration", str(cal),
                  "--out", str(out), "--set", "strategies=[self_consistency, best_of_n]")
        assert r.exit_code == 0, r.output
        rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
        assert {row["trace"]["notes"]["batch_problems"] for row in rows} == {expected}, name


def test_auto_with_a_verifier_scores_its_own_rules_by_it_calibrated_on_a_run_with_the_same_verifier(tmp_path):
    base = ["--backend", "scripted", "-b", "chains", "--max-tokens", "160"]
    cal = tmp_path / "cal"
    r = _eval(*base, "--limit", "24", "-s", "self_consistency", "-s", "best_of_n", "-s", "weighted_vote", "-n", "16",
              "--verifier", "chain", "--out", str(cal))
    assert r.exit_code == 0, r.output
    out = tmp_path / "auto"
    r = _eval(*base, "--set", "data.seed=1", "--limit", "12", "-s", "auto", "--budget", "30000", "--calibration",
              str(cal), "--verifier", "chain", "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rows[0]["strategy"]["verifier"]["kind"] == "chain"
    scored = [row for row in rows if row["trace"]["notes"]["strategy"] in ("best_of_n", "weighted_vote")]
    assert scored  # the checker's rules were chosen somewhere
    for row in scored:
        trace = row["trace"]
        # The chain checker's scores (0, 0.5 or 1 per sample), not mean logprobs (negative).
        assert len(trace["scores"]) == len(trace["samples"]) == trace["notes"]["n"]
        assert set(trace["scores"]) <= {0.0, 0.5, 1.0}
        if trace["notes"]["strategy"] == "best_of_n":
            assert trace["scores"][trace["selected"]] == max(trace["scores"])
    # A calibration scored by another verifier (or by none) is refused, saying what it holds.
    r = _eval(*base, "--limit", "4", "-s", "auto", "--budget", "30000", "--calibration", str(cal),
              "--verifier", "arithmetic", "--out", str(tmp_path / "bad"))
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "scored its samples with the verifier" in said and "'chain'" in said, r.output
    assert "Traceback" not in r.output
