"""Answer kinds: which extraction counts as free text, and the vote key of a tool-call answer.

A tool-call vote is only as good as its key: two replies that make the same call must share it
(whatever the argument order, spacing or case, 2.0 or 2), and different calls must not. The key is
also what a trace's ``votes`` shows, so it must read back as the calls it stands for.
"""

from __future__ import annotations

import json

import pytest

from tts.answers import extract_answer
from tts.answers.kinds import TEXT, call_key, is_free_text


def calls(*pairs: tuple[str, object]) -> str:
    """A tool-call answer as a reply writes it: a JSON list of {"name", "arguments"}."""
    return json.dumps([{"name": name, "arguments": args} for name, args in pairs], ensure_ascii=False)


def test_only_the_text_extraction_is_free_text():
    assert is_free_text(TEXT)
    assert not is_free_text(extract_answer) and not is_free_text(None) and not is_free_text(json.loads)
    # TEXT reads the reply's final text, and shows as TEXT in a strategy's settings
    assert TEXT("<think>scratch</think>\nIt is sunny in Paris.") == "It is sunny in Paris."
    assert repr(TEXT) == "TEXT"


def test_the_same_call_written_differently_has_one_key():
    key = call_key(calls(("get_weather", {"city": "Paris", "days": 2, "units": ["C", "hPa"]})))
    assert key is not None
    for same in (
        calls(("get_weather", {"units": ["c", " hpa"], "days": 2.0, "city": "  paris "})),
        calls(("get_weather", {"days": 2, "city": "PARIS", "units": ("C", "HPA")})),
        json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "units": ["C", "hPa"]}}),
    ):
        assert call_key(same) == key, same
    # spaces inside a string are collapsed, not removed
    assert call_key(calls(("search", {"q": "new   york"}))) == call_key(calls(("search", {"q": "New York"})))
    assert call_key(calls(("search", {"q": "newyork"}))) != call_key(calls(("search", {"q": "New York"})))


def test_different_calls_have_different_keys():
    base = call_key(calls(("get_weather", {"city": "Paris", "days": 2})))
    for other in (
        calls(("get_weather", {"city": "London", "days": 2})),   # another value
        calls(("get_weather", {"city": "Paris", "days": 2.5})),  # a non-integral number stays as it is
        calls(("get_weather", {"city": "Paris", "hours": 2})),   # another argument name
        calls(("get_forecast", {"city": "Paris", "days": 2})),   # another tool
        calls(("get_weather", {"city": "Paris", "days": 2}), ("search", {"q": "Paris"})),  # one call more
        calls(("get_weather", {"city": "Paris", "days": True})),  # a flag is not the number 1
    ):
        assert call_key(other) != base, other
    # the calls' order matters: a reply that books before it searches is another plan
    assert call_key(calls(("a", {}), ("b", {}))) != call_key(calls(("b", {}), ("a", {})))
    # argument names are kept as written (two names that differ in case are two arguments)
    assert call_key(calls(("f", {"Id": 1}))) != call_key(calls(("f", {"id": 1})))


def test_the_key_reads_back_as_the_normalised_calls():
    answer = calls(("book", {"Hotel": " Grand  Hôtel ", "nights": 3.0, "guests": [{"name": "ANA", "age": 30.0}]}),
                   ("notify", None))
    key = call_key(answer)
    assert json.loads(key) == [
        {"name": "book", "arguments": {"Hotel": "grand hôtel", "guests": [{"age": 30, "name": "ana"}], "nights": 3}},
        {"name": "notify", "arguments": {}},
    ]
    assert "hôtel" in key  # shown as written in a trace's votes, not as \\u escapes


def test_without_normalising_the_arguments_stay_as_written_in_any_order():
    answer = calls(("search", {"q": " New York ", "limit": 2.0}))
    key = call_key(answer, normalise=False)
    assert json.loads(key) == [{"name": "search", "arguments": {"limit": 2.0, "q": " New York "}}]
    assert key == call_key(calls(("search", {"limit": 2.0, "q": " New York "})), normalise=False)
    assert key != call_key(calls(("search", {"q": "new york", "limit": 2})), normalise=False)
    assert call_key(answer) == call_key(calls(("search", {"q": "new york", "limit": 2})))  # the default normalises


@pytest.mark.parametrize("answer", [
    "42", "the weather is sunny", None, "", '"get_weather"', "3.5", "[1, 2]",
    '[{"arguments": {"city": "Paris"}}]',                             # a call without a name
    '[{"name": "a", "arguments": {}}, "b"]',                          # one member is not a call
    '[{"name": "a", "arguments": {}}, {"arguments": {}}]',            # the second has no name
    "[" * 100_000 + "]" * 100_000,                                    # nested too deep to read
])
def test_what_is_not_a_list_of_calls_has_no_key(answer):
    assert call_key(answer) is None
