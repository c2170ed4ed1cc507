"""``tts eval`` as a user runs it: scripted backend end to end, and bad input refused clearly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tts.cli.app import app

runner = CliRunner(env={"COLUMNS": "220"})


def _eval(*args):
    return runner.invoke(app, ["eval", *args])


def test_scripted_eval_prints_the_table_and_resumes(tmp_path):
    out = tmp_path / "run"
    args = ["--backend", "scripted", "--benchmark", "demo", "--limit", "6", "-n", "1", "-n", "4", "-s",
            "self_consistency", "-s", "best_of_n", "--out", str(out)]
    r = _eval(*args)
    assert r.exit_code == 0, r.output
    assert "self_consistency" in r.output and "coverage" in r.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 6 * 4
    r2 = _eval(*args)
    assert r2.exit_code == 0 and "resumed: 6 problems" in r2.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 6 * 4


def test_math500_from_local_file(tmp_path, shared_data):
    r = _eval("--backend", "scripted", "--benchmark", "math500", "--data", str(shared_data / "benchmarks/math500.jsonl"),
              "--limit", "5", "--out", str(tmp_path / "m"))
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "m" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and rows[0]["gold"] == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_config_file_is_read(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {benchmark: demo, limit: 3}\nbackend: {kind: scripted}\nstrategies:\n  - {kind: weighted_vote, n: 2}\n")
    r = _eval("--config", str(cfg), "--out", str(tmp_path / "c"))
    assert r.exit_code == 0, r.output
    assert "weighted_vote" in r.output


def test_bad_input_is_refused_with_what_to_change(tmp_path):
    cases = [
        (["--strategy", "majority"], "Unknown strategy 'majority'"),
        (["-n", "0"], "-n must be at least 1"),
        (["--benchmark", "mmlu"], "Unknown benchmark 'mmlu'"),
        (["--benchmark", "jsonl", "--data", str(tmp_path / "missing.jsonl")], "does not exist"),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1", "answer": "2"}\n{oops\n')
    cases.append((["--data", str(bad)], "bad.jsonl, line 2: not valid JSON"))
    for extra, message in cases:
        r = _eval("--backend", "scripted", "--out", str(tmp_path / "x"), *extra)
        assert r.exit_code == 2, (extra, r.output)
        assert message in r.output, (extra, r.output)
        assert "Traceback" not in r.output


def test_unreachable_server_is_reported(tmp_path):
    r = _eval("--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--limit", "1", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    assert "Cannot reach an OpenAI-compatible server at http://127.0.0.1:9/v1" in r.output


def test_help_imports_no_engine():
    # `tts --help` must not pay for vllm/torch imports (its speed is measured in benchmarks/).
    code = "import sys, tts.cli.app; assert not any(m in sys.modules for m in ('vllm', 'torch', 'transformers'))"
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "tts.cli", "--help"], check=True, capture_output=True, text=True)
    assert "eval" in out.stdout and "cost" in out.stdout


def test_allocate_spends_a_token_budget_and_refuses_bad_budgets(tmp_path):
    base = ["--backend", "scripted", "--limit", "6", "--max-tokens", "48"]
    r = _eval(*base, "--allocate", "--budget", "3000", "--out", str(tmp_path / "a"))
    assert r.exit_code == 0, r.output
    assert "allocated-online" in r.output
    rows = [json.loads(x) for x in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and sum(row["budget_spent"] for row in rows) <= 3000
    assert {row["strategy"]["kind"] for row in rows} == {"self_consistency"} and rows[0]["allocation"]["chunk"] == 4
    for budget, message in (("0", "allocation.budget: Input should be greater than 0"),
                            ("-1", "allocation.budget: Input should be greater than 0"),
                            ("10", "smaller than one sample per problem")):
        r = _eval(*base, "--allocate", "--budget", budget, "--out", str(tmp_path / f"b{budget}"))
        assert r.exit_code == 2 and message in r.output, r.output
        assert "Traceback" not in r.output


def test_allocate_refuses_settings_it_would_ignore(tmp_path):
    base = ["--backend", "scripted", "--limit", "2", "--out", str(tmp_path / "x")]
    cases = [
        (["--allocate", "--budget", "1e4", "-s", "best_of_n"], "--allocate runs self_consistency"),
        (["--allocate", "--budget", "1e4", "-n", "16"], "drop -n and cap it with --n-max"),
        (["--chunk", "2"], "--chunk only applies with --allocate"),
        (["--allocate"], "--allocate needs --budget"),
        (["--allocate", "--budget", "1e4", "--allocate-mode", "offline"], "mode offline needs calibration"),
        (["--allocate", "--budget", "1e4", "--pilot", "8"], "pilot only applies to mode offline"),
        (["--allocate", "--budget", "1e4", "--budget-unit", "bytes"], "allocation.unit: Input should be"),
    ]
    for extra, message in cases:
        r = _eval(*base, *extra)
        assert r.exit_code == 2, (extra, r.output)
        assert message in " ".join(r.output.split()), (extra, r.output)
        assert "Traceback" not in r.output
    # self_consistency without -n is what allocation runs anyway.
    r = _eval(*base, "--allocate", "--budget", "2000", "-s", "self_consistency", "--max-tokens", "48")
    assert r.exit_code == 0, r.output


def test_allocation_section_of_a_config_file_merges_with_flags(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {benchmark: demo, limit: 4}\nbackend: {kind: scripted}\nsampling: {max_tokens: 48}\n"
                   "allocation: {budget: 2000, chunk: 2, n_max: 8}\n")
    r = _eval("--config", str(cfg), "--out", str(tmp_path / "y"))
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "y" / "results.jsonl").read_text().splitlines()]
    assert rows[0]["config"] == "allocated-online@2000tokens" and rows[0]["allocation"]["chunk"] == 2
    r = _eval("--config", str(cfg), "--budget", "2500", "--n-max", "6", "--out", str(tmp_path / "z"))
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "z" / "results.jsonl").read_text().splitlines()]
    assert rows[0]["config"] == "allocated-online@2500tokens"
    assert rows[0]["allocation"]["chunk"] == 2 and rows[0]["allocation"]["n_max"] == 6
    assert max(row["strategy"]["n"] for row in rows) <= 6


def test_the_out_field_of_a_config_file_is_where_results_go(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"data: {{benchmark: demo, limit: 2}}\nbackend: {{kind: scripted}}\nout: {tmp_path / 'from-yaml'}\n")
    r = _eval("--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "from-yaml" / "results.jsonl").read_text().splitlines()) == 2


def test_a_logprob_strategy_on_a_backend_without_logprobs_is_refused_not_run_as_first_sample(tmp_path, monkeypatch):
    from tts.backends import scripted

    real = scripted.ScriptedGenerator.from_config.__func__

    def without_logprobs(cls, config, problems=()):
        gen = real(cls, config, problems)
        gen.returns_logprobs = False
        return gen

    monkeypatch.setattr(scripted.ScriptedGenerator, "from_config", classmethod(without_logprobs))
    r = _eval("--backend", "scripted", "--limit", "2", "-s", "best_of_n", "-n", "4", "--out", str(tmp_path / "b"))
    assert r.exit_code == 2
    assert "best_of_n ranks samples by token log-probabilities" in r.output and "Traceback" not in r.output


def test_tts_strategies_lists_every_registered_strategy():
    from tts.registry import STRATEGIES

    r = runner.invoke(app, ["strategies"])
    assert r.exit_code == 0, r.output
    assert all(name in r.output for name in STRATEGIES.names())


def test_tts_strategies_name_shows_each_setting_with_its_docstring():
    """Field docstrings are read by tooling (pydantic's use_attribute_docstrings): the CLI and the
    JSON schema an MCP client or the server's clients see carry them."""
    from tts.search.tree.beam import BeamSearch

    r = runner.invoke(app, ["strategies", "beam"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "beam_width" in r.output and "the children of each node the search continues" in r.output
    schema = BeamSearch.config_class.model_json_schema()
    assert "children of each node" in schema["properties"]["beam_width"]["description"]
    r = runner.invoke(app, ["strategies", "beem"])
    assert r.exit_code != 0 and "Did you mean 'beam'" in r.output


def test_a_search_flag_that_no_strategy_takes_is_refused_not_ignored(tmp_path):
    r = _eval("--backend", "scripted", "--limit", "2", "-s", "self_consistency", "--beam-width", "4",
              "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and "--beam-width applies to" in r.output and "self_consistency" in r.output


def test_a_ladder_on_the_command_line_keeps_the_config_files_other_strategy_settings(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {benchmark: demo, limit: 2}\nbackend: {kind: scripted}\nstrategies:\n"
                   "  - {kind: best_of_n, n: 2, verifier: arithmetic}\n")
    r = _eval("--config", str(cfg), "-n", "1", "-n", "3", "--out", str(tmp_path / "c"))
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "c" / "run.json").read_text())
    assert [s["n"] for s in manifest["config"]["strategies"]] == [1, 3]
    assert all(s["verifier"]["kind"] == "arithmetic" for s in manifest["config"]["strategies"])


def test_set_reaches_strategy_and_verifier_settings_and_lands_in_the_manifest(tmp_path):
    r = _eval("--backend", "scripted", "--limit", "2", "-s", "rebase", "-s", "best_of_n", "-n", "4",
              "--verifier", "arithmetic", "--set", "balance_temperature=0.5", "--set", "verifier.aggregation=last",
              "--set", "select=verifier", "--max-tokens", "64", "--out", str(tmp_path / "s"))
    assert r.exit_code == 0, r.output
    strategies = json.loads((tmp_path / "s" / "run.json").read_text())["config"]["strategies"]
    rebase = next(s for s in strategies if s["kind"] == "rebase")
    assert rebase["balance_temperature"] == 0.5 and rebase["select"] == "verifier"
    assert all(s["verifier"] == {**s["verifier"], "kind": "arithmetic", "aggregation": "last"} for s in strategies)


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "self_consistency", "--set", "balance_temperature=0.5"], "--set balance_temperature applies to"),
    (["-s", "rebase", "--set", "verifier.no_such=1"], "has no setting 'no_such'"),
    (["-s", "rebase", "--set", "temperature"], "write KEY=VALUE"),
    (["-s", "rebase", "--set", "sampling.temperature=1"], "write KEY=VALUE"),
    (["-s", "best_of_n", "--set", "verifier.aggregation=min"], "choose one with --verifier"),
    (["-s", "rebase", "--set", "balance_temperature=-1"], "balance_temperature"),
    (["-s", "rebase", "--verifier", "arithmetic:/models/x"], "takes no ':MODEL'"),
    (["-s", "rebase", "--verifier", "prm:"], "name the model after the colon"),
    (["-s", "rebase", "--verifier", "no_such_verifier"], "Unknown verifier"),
])
def test_bad_settings_are_one_line_errors_that_say_what_to_change(tmp_path, args, message):
    r = _eval("--backend", "scripted", "--limit", "1", *args, "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output


def test_verifier_name_colon_model_sets_the_verifiers_model(tmp_path):
    from tts.cli.eval import _config_from_options

    opts = {k: None for k in ("benchmark", "strategy", "n", "model", "backend", "base_url", "data", "id_field",
                              "question_field", "answer_field", "limit", "temperature", "max_tokens", "batch_size",
                              "seed", "gpu", "allocate_mode", "calibration", "pilot", "chunk", "budget",
                              "budget_unit", "n_max", "beam_width", "max_depth", "settings")}
    opts.update(allocate=False, strategy=["beam"], n=[4], backend="scripted", verifier="prm:/models/my-prm")
    cfg = _config_from_options(opts, None)
    assert cfg.strategies[0].verifier.kind == "prm" and cfg.strategies[0].verifier.model == "/models/my-prm"


def test_tts_strategies_lists_every_strategy_and_marks_required_settings():
    from tts.registry import STRATEGIES

    r = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["strategies"])
    assert r.exit_code == 0, r.output
    assert all(name in r.output for name in STRATEGIES.names())
    assert "graph (required)" in r.output and "PydanticUndefined" not in r.output


def test_the_table_tells_configs_of_one_strategy_apart_by_their_settings(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("strategies: [{kind: best_of_n, n: 2}, {kind: best_of_n, n: 2, verifier: arithmetic}]\n"
                      "backend: {kind: scripted}\ndata: {benchmark: demo, limit: 2}\n")
    r = runner.invoke(app, ["eval", "--config", str(config), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if "best_of_n" in line]
    assert len(rows) == 2 and sum("verifier=arithmetic" in line for line in rows) == 1


def test_the_default_table_at_the_demo_configs_fits_a_100_column_terminal(tmp_path):
    # `make demo`'s configs (priced, so the cost column is there), rendered as a 100-column terminal would:
    # no line longer, nothing cut to '…', and no cell wrapped (the same text as on a terminal with room to spare).
    import io

    from rich.console import Console

    from tts.cli.eval import summary_table
    from tts.config import EvalConfig
    from tts.eval.runner import run_eval

    def render(table, width):
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(table)
        return console.export_text().splitlines()

    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo"}, "backend": {"kind": "scripted", "model": "smollm2-135m"},
        "sampling": {"max_tokens": 64},
        "strategies": [{"kind": k, "n": n} for k in ("self_consistency", "best_of_n") for n in (1, 4, 16)]})
    result = run_eval(cfg, tmp_path / "demo")
    table, _ = summary_table(result, cfg.backend.model, "h100")
    lines = render(table, 100)
    assert "h100 s/pb" in lines[2] and "FLOPs/pb" not in lines[2], lines[2]
    assert all(len(line) <= 100 for line in lines) and not any("…" in line for line in lines), "\n".join(lines)
    assert [line.strip() for line in lines] == [line.strip() for line in render(table, 300)]
    wide, _ = summary_table(result, cfg.backend.model, "h100", wide=True)
    assert all(h in render(wide, 300)[2] for h in ("no ans", "FLOPs/pb", "eFLOPs/pb", "h100 s/pb"))


def test_benchmark_help_names_every_registered_benchmark():
    # humaneval was registered but missing from `tts eval --help` and DataConfig's field doc: a user
    # reading either could not find it. BFCL's categories are named once, as bfcl:<category>.
    import inspect
    import re

    from tts.cli.eval import eval_command
    from tts.config import DataConfig
    from tts.registry import BENCHMARKS

    names = {n for n in BENCHMARKS.names() if not n.startswith("bfcl:")}
    option = inspect.signature(eval_command).parameters["benchmark"].default
    field_doc = DataConfig.model_fields["benchmark"].description or ""
    for text in (option.help, field_doc):
        listed = set(re.findall(r"[a-z0-9]+", text))
        assert names <= listed, sorted(names - listed)
        assert "bfcl:<category>" in text
