"""Model names that choose a strategy (tts.serve.routing): what each name routes to, what the
server lists, and the errors a client reads for a name it cannot serve."""

from __future__ import annotations

import pytest

from tts.registry import STRATEGIES
from tts.serve.routing import ALIASES, RoutingError, listed_models, route, strategy_spec


@pytest.mark.parametrize(("text", "spec"), [
    ("sc-16", {"kind": "self_consistency", "n": 16}),
    ("bon-4", {"kind": "best_of_n", "n": 4}),
    ("wv", {"kind": "weighted_vote"}),
    ("bf-2", {"kind": "budget_forcing", "n": 2}),
    ("gv", {"kind": "generative_verification"}),
    ("beam-4x8", {"kind": "beam", "beam_width": 4, "n": 8}),
    ("  Beam-2X16 ", {"kind": "beam", "beam_width": 2, "n": 16}),  # case and spaces do not matter
    ("self_consistency-12", {"kind": "self_consistency", "n": 12}),
    ("auto", {"kind": "auto"}),
])
def test_a_strategy_name_becomes_its_config(text, spec):
    assert strategy_spec(text) == spec


@pytest.mark.parametrize("text", ["sc-", "sc-x4", "16", "sc 16", "sc-4x", "sc/4", ""])
def test_a_name_of_the_wrong_form_is_a_404_that_shows_the_form(text):
    with pytest.raises(RoutingError) as err:
        strategy_spec(text)
    assert err.value.status == 404 and err.value.param == "model"
    assert str(err.value) == (f"cannot read a strategy from {text!r}; write <strategy>[-<n>] or "
                              "<strategy>-<width>x<n>, e.g. sc-16 or beam-4x8")


def test_an_unknown_strategy_is_a_404_that_lists_the_names_to_use():
    with pytest.raises(RoutingError) as err:
        strategy_spec("nope-4")
    names = ", ".join(sorted(set(STRATEGIES.names()) | set(ALIASES)))
    assert err.value.status == 404
    assert str(err.value) == f"unknown strategy 'nope' in 'nope-4'; use one of {names}"
    assert "sc, self_consistency" in str(err.value)  # aliases listed with the names, in order


def test_route_reads_the_strategy_before_the_last_slash_or_uses_the_default():
    assert route("sc-16/m", "m", "bon-4") == {"kind": "self_consistency", "n": 16}
    assert route(" m ", "m", "bon-4") == {"kind": "best_of_n", "n": 4}
    assert route("sc-4/m", "m", "sc") == {"kind": "self_consistency", "n": 4}


def test_a_served_hub_id_with_a_slash_routes_alone_and_after_a_strategy():
    served = "Qwen/Qwen2.5-1.5B-Instruct"  # `tts serve --model` takes a hub id and serves it under that name
    assert route(served, served, "sc-8") == {"kind": "self_consistency", "n": 8}
    assert route(f"beam-2x4/{served}", served, "sc-8") == {"kind": "beam", "beam_width": 2, "n": 4}
    assert all(route(model, served, "sc-8")["kind"] in STRATEGIES.names() for model in listed_models(served))
    for model in ("Qwen2.5-1.5B-Instruct", "sc-4/Qwen2.5-1.5B-Instruct", "sc-4/Other/Qwen2.5-1.5B-Instruct"):
        with pytest.raises(RoutingError, match="is not served here"):
            route(model, served, "sc-8")


def test_a_model_that_is_not_served_is_a_404_naming_the_served_one():
    with pytest.raises(RoutingError) as err:
        route("sc-16/other", "m", "sc-8")
    assert err.value.status == 404 and err.value.param == "model"
    assert str(err.value) == ("model 'sc-16/other' is not served here; this server serves 'm': use 'm' or "
                              "<strategy>/m, e.g. sc-16/m (GET /v1/models lists them)")


@pytest.mark.parametrize("model", ["", "   ", None, 3])
def test_a_missing_model_is_a_400_that_says_what_to_write(model):
    with pytest.raises(RoutingError) as err:
        route(model, "m", "sc-8")
    assert err.value.status == 400 and err.value.param == "model"
    assert str(err.value) == "model is required; use 'm' or <strategy>/m, e.g. sc-16/m"


def test_the_listed_models_are_the_model_and_one_routable_id_per_strategy():
    ids = listed_models("m")
    assert ids[0] == "m" and len(ids) == 1 + len(STRATEGIES.names())
    assert ids[1:] == [f"{_head(name)}/m" for name in STRATEGIES.names()]
    assert {"sc-8/m", "bon-8/m", "wv-8/m", "beam-4x8/m", "dvts-4x8/m", "bf/m", "gv/m", "usc/m"} <= set(ids)
    for model in ids:
        assert route(model, "m", "sc-8")["kind"] in STRATEGIES.names()  # every listed id routes


def _head(name):
    short = {v: k for k, v in ALIASES.items()}.get(name, name)
    return short + ("-4x8" if name in ("beam", "dvts") else "-8" if name in ("self_consistency", "best_of_n",
                                                                              "weighted_vote") else "")


def test_a_stop_in_the_model_name_is_refused_in_one_line_with_404_where_it_cannot_apply():
    from tts.config import stopping_strategies
    from tts.serve.routing import RoutingError, strategy_spec

    assert strategy_spec("sc-64+horizon") == {"kind": "self_consistency", "n": 64, "stop": {"rule": "horizon"}}
    with pytest.raises(RoutingError) as err:
        strategy_spec("beam-4x8+horizon")
    assert err.value.status == 404 and str(err.value) == (
        "'beam-4x8+horizon': strategy beam cannot stop a request early (it does more than vote over independent "
        f"samples); leave the stop out, or use one that can: {', '.join(stopping_strategies())}")
    with pytest.raises(RoutingError) as err:
        strategy_spec("sc-64+score")
    assert err.value.status == 404 and str(err.value) == (
        "'sc-64+score': unknown stop rule 'score'; use one of horizon, beta, dirichlet, exact, window (e.g. sc-64+horizon)")
