"""The server's request policy called directly (no HTTP): which strategies a server offers, the caps
on tokens, samples and budgets (with the exact numbers and messages a client sees), and how a
request's strategy settings are checked and its names (verifiers, calibrations) resolved.

tests/serve/test_security.py sends the attacks through the HTTP server; these pin the rules
themselves, each refusal by its message, its ``param`` and its ``code``.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from tts.backends.scripted import ScriptedGenerator
from tts.budgets.pricing import ComputeBudget
from tts.config import VerifierConfigBase
from tts.registry import STRATEGIES
from tts.serve import ServeConfig
from tts.serve.policy import IN_PROCESS_VERIFIERS, PolicyError, ServePolicy
from tts.session import Session


@pytest.fixture(scope="module")
def session():
    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as=None) as s:
        yield s


def _config(**kw: Any) -> ServeConfig:
    return ServeConfig(prompt="math", model="m", **kw)


def _policy(session, **kw: Any) -> ServePolicy:
    return ServePolicy.build(_config(**kw), session)


def _refused(call, *args, **kwargs) -> PolicyError:
    with pytest.raises(PolicyError) as err:
        call(*args, **kwargs)
    return err.value


# --- building: verifiers, strategies, calibrations ------------------------------------------------

def test_every_server_offers_the_in_process_verifiers_and_the_operators(session):
    policy = _policy(session, verifiers={"checker": {"kind": "arithmetic", "neutral": 0.25}})
    assert IN_PROCESS_VERIFIERS == ("arithmetic", "judge", "logprob", "self_certainty")
    assert policy.verifiers == {"arithmetic": {"kind": "arithmetic"}, "judge": {"kind": "judge"},
                                "logprob": {"kind": "logprob"}, "self_certainty": {"kind": "self_certainty"},
                                "checker": {"kind": "arithmetic", "neutral": 0.25}}


def test_a_verifier_the_operator_misconfigured_stops_the_server_by_name(session):
    with pytest.raises(ValueError, match=r"^verifier 'bad': neutral: Input should be a valid number"):
        _policy(session, verifiers={"bad": {"kind": "arithmetic", "neutral": "x"}})


def test_an_allowed_strategy_that_cannot_run_stops_the_server(session):
    with pytest.raises(ValueError) as err:
        _policy(session, strategies=("self_consistency", "auto"))
    assert str(err.value) == ("strategy 'auto' cannot run with this server's settings (strategy 'auto': calibration "
                              "is required; change calibration); give what it needs (auto: --calibration) or do not "
                              "allow it")
    with pytest.raises(ValueError, match="nope"):
        _policy(session, strategies=("nope",))


def test_the_first_calibration_is_autos_default(session):
    policy = _policy(session, calibrations={"main": "/data/cal.jsonl", "other": "/data/other.jsonl"})
    assert policy.fill == {"auto": {"calibration": "/data/cal.jsonl"}}
    assert policy.settings["auto"] == {"calibration": "/data/cal.jsonl"}
    assert policy.calibrations == {"main": "/data/cal.jsonl", "other": "/data/other.jsonl"}
    assert policy.allows("auto")
    assert policy.resolve({"kind": "auto", "pilot": 3}) == {"kind": "auto", "calibration": "/data/cal.jsonl",
                                                            "pilot": 3}
    # The operator's own setting for auto wins: nothing is filled in.
    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as=None,
                 strategy_settings={"auto": {"calibration": "/data/mine.jsonl"}, "beam": {"n": 4}}) as own:
        policy = _policy(own, calibrations={"main": "/data/cal.jsonl"})
        assert policy.fill == {}
        assert policy.settings == {"auto": {"calibration": "/data/mine.jsonl"}, "beam": {"n": 4}}
        assert policy.resolve({"kind": "auto"}) == {"kind": "auto"}
    assert _policy(session).fill == {} and not _policy(session).allows("auto")


# --- which strategies --------------------------------------------------------------------------

def test_a_session_without_strategy_settings_has_none():
    class Bare:
        """Only what the policy calls: a session that builds strategy configs."""

        def strategy_config(self, spec, n, budget):
            if spec["kind"] != "self_consistency":
                raise ValueError("not here")
            return spec

    policy = ServePolicy.build(_config(), Bare())
    assert policy.settings == {} and policy.offered() == ["self_consistency"]


def test_a_strategys_defaults_may_be_sent_where_the_operator_set_nothing(session):
    policy = _policy(session)
    default = STRATEGIES.load("revision").config_class.model_fields["critique_template"].default
    assert policy.resolve({"kind": "revision", "critique_template": default}) == {
        "kind": "revision", "critique_template": default}


def test_an_allow_list_is_exactly_the_strategies_offered(session):
    policy = _policy(session, strategies=("self_consistency", "best_of_n"))
    assert policy.offered() == ["best_of_n", "self_consistency"]
    assert policy.allows("best_of_n") and not policy.allows("beam") and not policy.allows("nope")
    assert _refused(policy.resolve, {"kind": "beam"}).args[0] == (
        "strategy 'beam' is not offered on this server; use one of best_of_n, self_consistency")
    assert _refused(policy.resolve, {"kind": "auto"}).args[0] == (
        "strategy 'auto' is not offered on this server; use one of best_of_n, self_consistency")


def test_by_default_every_strategy_complete_with_the_operators_settings(session):
    policy = _policy(session)
    offered = policy.offered()
    assert offered == sorted(offered)
    # auto and graph need operator files; code-running strategies need --allow-code-execution.
    assert set(STRATEGIES.names()) - set(offered) == {"auto", "graph", "codet", "exec_vote", "program_vote",
                                                       "public_tests", "tir"}
    assert not policy.allows("nope")
    err = _refused(policy.resolve, {"kind": "graph"})
    assert err.args[0] == (f"strategy 'graph' is not offered on this server; use one of {', '.join(offered)}; "
                           "auto needs tts serve --calibration, graph a graph in the operator's settings")
    assert (err.param, err.code) == ("tts.strategy", None)
    assert _refused(policy.resolve, {"kind": "auto"}).args[0] == (
        f"strategy 'auto' is not offered on this server; use one of {', '.join(offered)}; "
        "auto needs tts serve --calibration, graph a graph in the operator's settings")
    err = _refused(policy.resolve, {"strategies": ["beam"]})
    assert err.args[0] == f"a strategy object needs a 'kind' naming a strategy: one of {', '.join(offered)}"
    assert _refused(policy.resolve, {"kind": 3}).args[0].startswith("a strategy object needs a 'kind'")
    err = _refused(policy.resolve, {"kind": "nope"})
    assert err.args[0] == f"strategy 'nope' is not offered on this server; use one of {', '.join(offered)}"


def test_whether_a_strategy_runs_is_asked_once_and_any_failure_means_not_offered():
    asked: list[str] = []

    def check(kind: str) -> None:
        asked.append(kind)
        if kind == "beam":
            raise RuntimeError("not a ValueError")
        if kind == "dvts":
            raise ValueError("incomplete")

    policy = ServePolicy(_config(), {}, {}, check)
    assert policy.allows("self_consistency") is True
    assert policy.allows("beam") is False and policy.allows("dvts") is False
    assert policy.allows("self_consistency") and not policy.allows("beam")
    assert asked == ["self_consistency", "beam", "dvts"]
    assert not policy.allows("nope") and "nope" not in asked


# --- the caps --------------------------------------------------------------------------------

def test_max_tokens_up_to_the_servers_limit(session):
    policy = _policy(session, max_tokens=512)
    policy.check_max_tokens(512)
    policy.check_max_tokens(None)
    err = _refused(policy.check_max_tokens, 513)
    assert err.args[0] == "max_tokens=513 is over this server's limit of 512 tokens per sample; lower it"
    assert (err.param, err.code) == ("max_tokens", None)
    assert _refused(policy.check_max_tokens, 600, "arguments.max_tokens").param == "arguments.max_tokens"


def test_the_token_cap_is_the_lower_of_the_budget_limit_and_the_rate_limit(session):
    assert _policy(session, max_budget_tokens=5000).token_cap() == (5000, "this server's limit")
    assert _policy(session, max_budget_tokens=5000, rate_limit_tokens=4000).token_cap() == (
        4000, "this server's rate limit")
    assert _policy(session, max_budget_tokens=5000, rate_limit_tokens=5000).token_cap() == (
        5000, "this server's limit")
    assert _policy(session, max_budget_tokens=5000, rate_limit_tokens=6000).token_cap() == (
        5000, "this server's limit")


def test_a_clients_budget_must_fit_the_cap_over_all_its_solves(session):
    policy = _policy(session, max_budget_tokens=5000)
    pricer = session.pricer
    asked = ComputeBudget(1000, "tokens")
    assert policy.solve_budget(pricer, asked, 100) == (asked, 1000)
    assert policy.solve_budget(pricer, asked, 100, solves=5) == (asked, 1000)  # 5000: exactly the cap
    err = _refused(policy.solve_budget, pricer, asked, 100, solves=6)
    assert err.args[0] == (f"a budget of {asked} allows 1000 generated tokens x 6 solves (n choices x prompts) = "
                           "6000, over this server's limit of 5000 per request; lower the budget or n")
    assert (err.param, err.code) == ("tts.budget", "budget_too_large")
    err = _refused(policy.solve_budget, pricer, ComputeBudget(6000, "tokens"), 100, per="call", param="budget")
    assert err.args[0] == (f"a budget of {ComputeBudget(6000, 'tokens')} allows 6000 generated tokens, over this "
                           "server's limit of 5000 per call; lower the budget")
    assert (err.param, err.code) == ("budget", "budget_too_large")


def test_two_solves_over_the_cap_are_named_in_the_refusal(session):
    policy = _policy(session, max_budget_tokens=5000)
    asked = ComputeBudget(3000, "tokens")
    err = _refused(policy.solve_budget, session.pricer, asked, 100, solves=2)
    assert err.args[0] == (f"a budget of {asked} allows 3000 generated tokens x 2 solves (n choices x prompts) = "
                           "6000, over this server's limit of 5000 per request; lower the budget or n")


def test_a_budget_in_eflops_is_held_to_its_allowance_at_the_shortest_prompt():
    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as="smollm2-135m") as priced:
        pricer = priced.pricer
        policy = _policy(priced, max_budget_tokens=10**9)
        # A budget on the edge: at a 1-token prompt it pays for one more sample than at 2 tokens.
        amount = next(a for a in (x * 1e9 for x in range(1, 20000, 7))
                      if _fits(pricer, a, 1) > _fits(pricer, a, 2) > 0)
        asked = ComputeBudget(amount, "eflops")
        budget, tokens = policy.solve_budget(pricer, asked, 64)
        assert budget is asked and tokens == _fits(pricer, amount, 1) * 64


def _fits(pricer, amount: float, prompt: int) -> int:
    """Samples of 64 tokens an eFLOPs budget pays for at a prompt length (0: not one)."""
    from tts.budgets.pricing import BudgetError

    try:
        return pricer.allowance(ComputeBudget(amount, "eflops"), prompt, 64) // 64
    except BudgetError:
        return 0


def test_a_budget_that_pays_for_no_sample_is_invalid(session):
    policy = _policy(session, max_budget_tokens=5000)
    err = _refused(policy.solve_budget, session.pricer, ComputeBudget(50, "tokens"), 100)
    assert "does not cover one sample of up to 100 tokens" in err.args[0] and "\n" not in err.args[0]
    assert (err.param, err.code) == ("tts.budget", "invalid_budget")
    err = _refused(policy.solve_budget, session.pricer, ComputeBudget(1, "eflops"), 100, param="b")
    assert "needs a cost model" in err.args[0] and (err.param, err.code) == ("b", "invalid_budget")


def test_without_a_budget_each_solve_gets_its_share_of_the_cap(session):
    policy = _policy(session, max_budget_tokens=5000)
    pricer = session.pricer
    assert policy.solve_budget(pricer, None, 100) == (ComputeBudget(5000, "tokens"), 5000)
    assert policy.solve_budget(pricer, None, 100, solves=3) == (ComputeBudget(1666, "tokens"), 1666)
    assert policy.solve_budget(pricer, None, 100, solves=2, share=0.5) == (ComputeBudget(1250, "tokens"), 1250)
    assert policy.solve_budget(pricer, None, 5000) == (ComputeBudget(5000, "tokens"), 5000)  # one sample fits
    assert policy.solve_budget(pricer, None, 1666, solves=3)[1] == 1666
    # int(cap * share) before the split: 5000 * 0.3333 = 1666.5 -> 1666 -> 833 each of 2
    assert policy.solve_budget(pricer, None, 800, solves=2, share=0.3333)[1] == 833


def test_a_cap_too_small_for_one_sample_says_what_to_lower(session):
    policy = _policy(session, max_budget_tokens=5000)
    pricer = session.pricer
    err = _refused(policy.solve_budget, pricer, None, 5001)
    assert err.args[0] == ("this server's limit of 5000 generated tokens per request is less than one sample of "
                           "max_tokens=5001; lower max_tokens")
    assert (err.param, err.code) == ("max_tokens", "budget_too_large")
    err = _refused(policy.solve_budget, pricer, None, 2000, solves=3, split_param="tts.n")
    assert err.args[0] == ("this server's limit of 5000 generated tokens per request, split over 3 solves (n choices "
                           "x prompts), leaves 1666 each, less than one sample of max_tokens=2000; lower n, send "
                           "fewer prompts or lower max_tokens")
    assert (err.param, err.code) == ("tts.n", "budget_too_large")
    err = _refused(policy.solve_budget, pricer, None, 4000, share=0.5, per="call")
    assert err.args[0].startswith("this server's limit of 5000 generated tokens per call, split over 1 solves")
    assert "leaves 2500 each" in err.args[0] and err.param == "n"
    limited = _policy(session, max_budget_tokens=5000, rate_limit_tokens=3000)
    assert _refused(limited.solve_budget, pricer, None, 4000).args[0].startswith(
        "this server's rate limit of 3000 generated tokens per request is less than one sample")


def test_a_strategys_sample_count_up_to_max_samples(session):
    policy = _policy(session, max_samples=16)
    config = policy.strategy_config(session, {"kind": "self_consistency"}, 16, None)
    assert (config.kind, config.n) == ("self_consistency", 16)
    assert policy.strategy_config(session, {"kind": "self_consistency", "n": 3}, None, None).n == 3
    err = _refused(policy.strategy_config, session, {"kind": "self_consistency"}, 17, None,
                   samples_limit=" samples per choice", n_hint=" (the model name's sc-N)", param="model")
    assert err.args[0] == "n=17 is over this server's limit of 16 samples per choice; lower n (the model name's sc-N)"
    assert (err.param, err.code) == ("model", None)
    assert _refused(policy.strategy_config, session, {"kind": "self_consistency"}, 17, None).args[0] == (
        "n=17 is over this server's limit of 16; lower n")
    assert _refused(policy.strategy_config, session, {"kind": "self_consistency"}, 17, None).param == "tts.n"
    err = _refused(policy.strategy_config, session, {"kind": "self_consistency", "n": 0}, None, None)
    assert err.args[0].startswith("strategy 'self_consistency': ") and "\n" not in err.args[0]
    assert err.param == "tts.strategy"
    assert "greater than or equal to 1" in err.args[0]
    err = _refused(policy.strategy_config, session, {"n": 3}, None, None)
    assert err.args[0].startswith("strategy {'n': 3}: ")


def test_a_strategy_that_plans_within_its_budget_gets_the_solves_budget(session):
    policy = _policy(session, calibrations={"main": "/data/cal.jsonl"})
    config = policy.strategy_config(session, policy.resolve({"kind": "auto"}), None, ComputeBudget(5000, "tokens"))
    assert (config.kind, config.budget, config.budget_unit) == ("auto", 5000, "tokens")  # auto has no n: not capped


# --- a request's settings --------------------------------------------------------------------

def test_knobs_take_their_own_type_within_the_caps(session):
    policy = _policy(session, max_samples=16, max_tokens=256)
    assert policy.resolve({"kind": "beam", "n": 16, "step_tokens": 256, "heal_separator": False,
                           "select": "verifier", "beam_width": None}) == {
        "kind": "beam", "n": 16, "step_tokens": 256, "heal_separator": False, "select": "verifier",
        "beam_width": None}
    err = _refused(policy.resolve, {"kind": "beam", "n": "16"})
    assert err.args[0] == "tts.strategy.n: n must be a number, got text" and err.param == "tts.strategy.n"
    assert _refused(policy.resolve, {"kind": "beam", "n": True}).args[0] == "tts.strategy.n: n must be a number, got bool"
    assert _refused(policy.resolve, {"kind": "beam", "n": None}).args[0] == (
        "tts.strategy.n: n must be a number, got NoneType")
    assert _refused(policy.resolve, {"kind": "beam", "select": "best"}).args[0] == (
        "tts.strategy.select: select must be one of 'verifier', 'weighted_vote', got text")
    # "n" itself is checked on the built config; the knobs that count samples here.
    assert policy.resolve({"kind": "beam", "n": 17}) == {"kind": "beam", "n": 17}
    err = _refused(policy.resolve, {"kind": "beam", "step_tokens": 257})
    assert err.args[0] == "tts.strategy.step_tokens: step_tokens=257 is over this server's limit of 256 tokens; lower it"
    assert err.param == "tts.strategy.step_tokens"


def test_sample_counts_are_capped_by_max_samples(session):
    policy = _policy(session, max_samples=16, calibrations={"main": "/data/cal.jsonl"})
    assert policy.resolve({"kind": "auto", "n_max": 16, "pilot": 16})["n_max"] == 16
    for key in ("n_max", "pilot"):
        err = _refused(policy.resolve, {"kind": "auto", key: 17})
        assert err.args[0] == f"tts.strategy.{key}: {key}=17 is over this server's limit of 16 samples; lower it"
        assert err.param == f"tts.strategy.{key}"
    # A float knob is not a count: 17.5 passes the cap check (the config's own range decides).
    assert policy.resolve({"kind": "auto", "switch_z": 17.5})["switch_z"] == 17.5
    # A verifier's max_tokens is a token setting: the per-sample cap holds there too.
    small = _policy(session, max_tokens=128)
    err = _refused(small.resolve, {"kind": "best_of_n", "verifier": {"kind": "judge", "max_tokens": 129}})
    assert err.args[0] == ("tts.strategy.verifier.max_tokens: max_tokens=129 is over this server's limit of 128 "
                           "tokens; lower it")
    assert small.resolve({"kind": "best_of_n", "verifier": {"kind": "judge", "max_tokens": 128,
                                                            "per_step": True}})["verifier"] == {
        "kind": "judge", "max_tokens": 128, "per_step": True}


def test_a_setting_the_strategy_does_not_have_is_refused_by_name(session):
    policy = _policy(session)
    err = _refused(policy.resolve, {"kind": "self_consistency", "beams": 2})
    assert err.args[0] == "tts.strategy.beams: 'self_consistency' has no setting 'beams'; its settings are n, stop"
    assert err.param == "tts.strategy.beams"
    err = _refused(policy.resolve, {"kind": "best_of_n", "beams": 2})
    assert err.args[0] == "tts.strategy.beams: 'best_of_n' has no setting 'beams'; its settings are n, stop, verifier"
    err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": {"kind": "logprob", "votes": 3}})
    assert err.args[0] == ("tts.strategy.verifier.votes: 'verifier' has no setting 'votes'; its settings are "
                           "aggregation")


def test_operator_owned_settings_only_as_the_server_would_use_them(session):
    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as=None,
                 strategy_settings={"revision": {"instruction": "Try again."}}) as own:
        policy = _policy(own)
        default = STRATEGIES.load("revision").config_class.model_fields["critique_template"].default
        assert policy.resolve({"kind": "revision", "instruction": "Try again.", "critique_template": default}) == {
            "kind": "revision", "instruction": "Try again.", "critique_template": default}
        err = _refused(policy.resolve, {"kind": "revision", "instruction": "Ignore the question."})
        assert err.args[0] == ("tts.strategy.instruction: this server does not let requests set instruction (text, "
                               "paths, models and nested configs are the operator's); leave it out. Requests may set "
                               "numbers, true/false and choices, and name a verifier or calibration")
        assert err.param == "tts.strategy.instruction"
        # The field's own default stays allowed beside the operator's value (the rule: the default
        # or the operator's setting; neither is the client's choice).
        field_default = STRATEGIES.load("revision").config_class.model_fields["instruction"].default
        assert policy.resolve({"kind": "revision", "instruction": field_default})["instruction"] == field_default
        assert _refused(policy.resolve, {"kind": "revision", "critique_template": "{score}"}).param == (
            "tts.strategy.critique_template")


def test_verifiers_by_name_or_with_number_overrides(session):
    policy = _policy(session, verifiers={"checker": {"kind": "arithmetic", "neutral": 0.25}})
    assert policy.resolve({"kind": "best_of_n", "verifier": "checker"}) == {
        "kind": "best_of_n", "verifier": {"kind": "arithmetic", "neutral": 0.25}}
    assert policy.resolve({"kind": "best_of_n", "verifier": {"kind": "checker", "neutral": 0.75}}) == {
        "kind": "best_of_n", "verifier": {"kind": "arithmetic", "neutral": 0.75}}
    assert policy.resolve({"kind": "best_of_n", "verifier": None}) == {"kind": "best_of_n", "verifier": None}
    names = "arithmetic, checker, judge, logprob, self_certainty"
    err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": "prm"})
    assert err.args[0] == (f"tts.strategy.verifier: 'prm' is not a verifier this server offers; use one of {names} "
                           "(operators add more with tts serve --verifier NAME=SPEC)")
    assert err.param == "tts.strategy.verifier"
    for bad in (3, ["checker"], {"neutral": 0.5}):
        err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": bad})
        assert err.args[0] == (f"tts.strategy.verifier: name a verifier ({names}) or give "
                               "{\"kind\": <name>, ...numbers}")
        assert err.param == "tts.strategy.verifier"
    err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": {"kind": "checker", "neutral": "0.5"}})
    assert err.args[0] == "tts.strategy.verifier.neutral: neutral must be a number, got text"
    # The operator's verifier dict is not changed by a request's overrides.
    assert policy.verifiers["checker"] == {"kind": "arithmetic", "neutral": 0.25}


def test_an_operator_verifiers_own_text_may_be_sent_back_unchanged(session):
    policy = _policy(session, verifiers={"strict": {"kind": "judge", "solution_question": "Is every step right?"}})
    assert policy.resolve({"kind": "best_of_n", "verifier": {"kind": "strict", "solution_question":
                                                             "Is every step right?", "votes": 3}})["verifier"] == {
        "kind": "judge", "solution_question": "Is every step right?", "votes": 3}
    err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": {"kind": "strict", "solution_question": "{x}"}})
    assert err.param == "tts.strategy.verifier.solution_question"


class _Nesting(VerifierConfigBase):
    """A verifier config holding another verifier (none of the built-in ones does)."""

    kind: Literal["nest"] = "nest"
    inner: VerifierConfigBase | None = None
    weight: float = 1.0


def test_nested_verifiers_stop_at_four_levels(session, monkeypatch):
    from tts.registry import VERIFIERS

    real_load = VERIFIERS.load

    class _Entry:
        config_class = _Nesting

    monkeypatch.setattr(VERIFIERS, "load", lambda name: _Entry if name == "nest" else real_load(name))
    policy = ServePolicy(_config(), {}, {"nest": {"kind": "nest"}}, lambda kind: None)

    def nested(levels: int) -> Any:
        value: Any = "nest"
        for _ in range(levels):
            value = {"kind": "nest", "inner": value, "weight": 0.5}
        return value

    out = policy.resolve({"kind": "best_of_n", "verifier": nested(4)})
    inner = out["verifier"]
    for _ in range(3):
        assert inner["weight"] == 0.5
        inner = inner["inner"]
    assert inner == {"kind": "nest", "inner": {"kind": "nest"}, "weight": 0.5}
    err = _refused(policy.resolve, {"kind": "best_of_n", "verifier": nested(5)})
    assert err.args[0] == ("tts.strategy.verifier.inner.inner.inner.inner: verifiers nested too deep; name one")
    assert err.param == "tts.strategy.verifier.inner.inner.inner.inner"


def test_calibrations_by_name_or_as_the_operators_path(session):
    policy = _policy(session, calibrations={"main": "/data/cal.jsonl", "other": "/data/other.jsonl"})
    assert policy.resolve({"kind": "auto", "calibration": "other"})["calibration"] == "/data/other.jsonl"
    assert policy.resolve({"kind": "auto", "calibration": "/data/other.jsonl"})["calibration"] == "/data/other.jsonl"
    for bad in ("/etc/passwd", "third", 3):
        err = _refused(policy.resolve, {"kind": "auto", "calibration": bad})
        assert err.args[0] == "tts.strategy.calibration: name a calibration this server has: 'main', 'other'"
        assert err.param == "tts.strategy.calibration"
    with Session(generator=ScriptedGenerator(default={"42": 1.0}), price_as=None,
                 strategy_settings={"auto": {"calibration": "/data/mine.jsonl"}}) as own:
        policy = _policy(own)
        assert policy.resolve({"kind": "auto", "calibration": "/data/mine.jsonl"}) == {
            "kind": "auto", "calibration": "/data/mine.jsonl"}
        err = _refused(policy.resolve, {"kind": "auto", "calibration": "/data/cal.jsonl"})
        assert err.args[0] == ("tts.strategy.calibration: name a calibration this server has: none (the operator "
                               "adds them with tts serve --calibration NAME=PATH)")


def test_autos_strategies_are_among_those_offered(session):
    policy = _policy(session, strategies=("auto", "self_consistency", "best_of_n"),
                     calibrations={"main": "/data/cal.jsonl"})
    assert policy.resolve({"kind": "auto", "strategies": ["self_consistency", "best_of_n"]})["strategies"] == [
        "self_consistency", "best_of_n"]
    assert policy.resolve({"kind": "auto", "strategies": "self_consistency, best_of_n"})["strategies"] == (
        "self_consistency, best_of_n")
    err = _refused(policy.resolve, {"kind": "auto", "strategies": ["self_consistency", "beam"]})
    assert err.args[0] == ("tts.strategy.strategies: strategy 'beam' is not offered on this server; use one of "
                           "auto, best_of_n, self_consistency")
    assert err.param == "tts.strategy.strategies"
    assert _refused(policy.resolve, {"kind": "auto", "strategies": "self_consistency,beam"}).args[0].startswith(
        "tts.strategy.strategies: strategy 'beam' is not offered")
    assert _refused(policy.resolve, {"kind": "auto", "strategies": [3]}).args[0].startswith(
        "tts.strategy.strategies: strategy '3' is not offered")


CODE_RUNNERS = ("program_vote", "tir", "exec_vote", "public_tests", "codet")


def test_strategies_that_run_code_are_offered_only_where_the_operator_allows_code(session):
    from tts.serve.policy import CODE_REFUSED

    policy = _policy(session)
    for kind in CODE_RUNNERS:
        assert not policy.allows(kind)
        assert _refused(policy.resolve, {"kind": kind}).args[0].endswith(f"; {kind} {CODE_REFUSED}")
    # A plain strategy that is not offered is refused without the code sentence.
    listed = _policy(session, strategies=("self_consistency",))
    assert _refused(listed.resolve, {"kind": "best_of_n"}).args[0] == (
        "strategy 'best_of_n' is not offered on this server; use one of self_consistency")
    with pytest.raises(ValueError) as err:
        _policy(session, strategies=("self_consistency", "program_vote"))
    assert str(err.value) == ("strategy 'program_vote' runs model-written programs: allow code execution "
                              "(tts serve --allow-code-execution) or do not offer it")
    allowed = _policy(session, allow_code_execution=True)
    assert all(allowed.allows(kind) for kind in CODE_RUNNERS)
    assert _policy(session, strategies=("program_vote",), allow_code_execution=True).offered() == ["program_vote"]


def test_a_setting_that_runs_code_is_refused_unless_the_operator_allows_code(session):
    from tts.serve.policy import CODE_REFUSED

    spec = {"kind": "revision", "feedback": "execution"}
    err = _refused(_policy(session).strategy_config, session, spec, None, None)
    assert err.args[0] == f"strategy 'revision' with these settings {CODE_REFUSED}"
    assert (err.param, err.code) == ("tts.strategy", "code_execution_disabled")
    assert _policy(session, allow_code_execution=True).strategy_config(session, spec, None, None).feedback == "execution"
    assert _policy(session).strategy_config(session, {"kind": "revision"}, None, None).feedback != "execution"


def test_an_operator_only_setting_is_never_a_requests_even_where_code_may_run(session):
    policy = _policy(session, allow_code_execution=True)
    err = _refused(policy.resolve, {"kind": "program_vote", "unsafe_no_sandbox": True})
    assert err.param == "tts.strategy.unsafe_no_sandbox"
    assert err.args[0].startswith("tts.strategy.unsafe_no_sandbox: this server does not let requests set "
                                  "unsafe_no_sandbox")
    assert policy.resolve({"kind": "program_vote", "n": 2})["n"] == 2


def test_a_refusal_already_naming_its_strategy_is_not_prefixed_twice(session):
    class Worded:
        def strategy_config(self, spec, n, budget):
            raise ValueError(f"strategy {spec['kind']!r}: n=0 is refused; change n")

    err = _refused(_policy(session).strategy_config, Worded(), {"kind": "self_consistency"}, None, None)
    assert err.args[0] == "strategy 'self_consistency': n=0 is refused; change n"
    assert _refused(_policy(session).strategy_config, session, {"kind": "nope"}, None, None).args[0].startswith(
        "strategy 'nope': Unknown strategy 'nope'.")


def test_a_requests_stop_is_a_rule_name_or_its_settings_each_checked_like_a_strategys(session):
    policy = _policy(session, max_samples=16)
    sc = {"kind": "self_consistency"}
    assert policy.resolve({**sc, "stop": "window"}) == {**sc, "stop": {"rule": "window"}}
    assert policy.resolve({**sc, "stop": {"rule": "beta", "confidence": 0.9, "wave": 4}}) == {
        **sc, "stop": {"rule": "beta", "confidence": 0.9, "wave": 4}}
    assert policy.resolve({**sc, "stop": None}) == {**sc, "stop": None}  # no stop: left to the strategy
    for bad in (3, ["window"]):
        err = _refused(policy.resolve, {**sc, "stop": bad})
        assert (err.args[0], err.param) == ('tts.strategy.stop: give a rule name (horizon, beta, dirichlet, exact, '
                                            'window) or {"rule": ..., numbers}', "tts.strategy.stop")
    err = _refused(policy.resolve, {**sc, "stop": {"rule": "window", "confidence": "high"}})
    assert (err.args[0], err.param) == ("tts.strategy.stop.confidence: confidence must be a number, got text",
                                        "tts.strategy.stop.confidence")
    err = _refused(policy.resolve, {**sc, "stop": {"rule": 5}})
    assert (err.args[0], err.param) == ("tts.strategy.stop.rule: rule must be one of 'horizon', 'beta', 'dirichlet', "
                                        "'exact', 'window', 'score', got int", "tts.strategy.stop.rule")
    err = _refused(policy.resolve, {**sc, "stop": {"rule": "window", "patience": 2}})
    assert (err.args[0], err.param) == ("tts.strategy.stop.patience: 'stop' has no setting 'patience'; its settings "
                                        "are rule, confidence, wave, prior, window, top_k, threshold",
                                        "tts.strategy.stop.patience")
