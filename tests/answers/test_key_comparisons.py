"""How answer keys spend math-verify: plain numbers without its parser, numbers far apart without
its comparison, each pair compared once (either order), at most ``max_pairs`` comparisons a call,
and a failed comparison never merging; what the cap and a failure leave in the debug log."""

from __future__ import annotations

import logging

import pytest

from tts.answers import equivalence
from tts.answers.equivalence import AnswerKeys, vote_form


@pytest.fixture
def verify_calls(monkeypatch):
    """math-verify's ``verify`` as AnswerKeys calls it, counted (pairs in call order)."""
    real = equivalence._math_verify()
    calls = []

    class Counting:
        @staticmethod
        def verify(gold, answer, **kwargs):
            calls.append((gold, answer))
            return real.verify(gold, answer, **kwargs)

    monkeypatch.setattr(equivalence, "_math_verify", lambda: Counting)
    return calls


def test_plain_integers_and_fractions_are_read_without_the_latex_parser(monkeypatch):
    def refuse(text):
        raise AssertionError(f"parsed {text!r}")

    monkeypatch.setattr(equivalence, "_mv_parse", refuse)
    keys = AnswerKeys().keys(["12", "-3/4", "\\frac{6}{8}", "-\\frac{3}{4}", "3/4", "0"])
    assert keys == ["12", "-3/4", "\\frac{6}{8}", "-3/4", "\\frac{6}{8}", "0"]


def test_numbers_far_apart_are_told_apart_without_math_verify(verify_calls):
    keys = AnswerKeys().keys(["1", "2", "3.5", "\\frac{7}{3}", "\\sqrt{2}", "\\pi", "1.0015", "0.0001"])
    assert len(set(keys)) == 8 and verify_calls == []


@pytest.mark.parametrize("near", [["1000", "1000.5"], ["0.0001", "0.0005"], ["1", "1.0009"]])
def test_numbers_within_a_thousandth_are_left_to_math_verify(verify_calls, near):
    assert len(set(AnswerKeys().keys(near))) == 2 and len(verify_calls) == 1


def test_unbounded_expressions_are_never_compared(verify_calls):
    keys = AnswerKeys().keys(["\\sum_{k=1}^{n} k", "\\frac{n(n+1)}{2}"])
    assert len(set(keys)) == 2 and verify_calls == []


def test_a_pair_is_compared_once_in_either_order(verify_calls):
    keys = AnswerKeys()
    assert keys.keys(["0.5", "\\frac{1}{\\sqrt{4}}"]) == ["0.5", "0.5"]
    assert keys.keys(["\\frac{1}{\\sqrt{4}}", "0.5"]) == ["\\frac{1}{\\sqrt{4}}"] * 2
    assert len(verify_calls) == 1


def test_the_comparison_cap_is_exact_and_logged_when_reached(caplog):
    answers = ["0.5", "\\frac{1}{2}", "0.50000001"]  # two comparisons to merge all three
    with caplog.at_level(logging.DEBUG, logger="tts.answers.equivalence"):
        assert AnswerKeys(max_pairs=2).keys(answers) == ["0.5", "0.5", "0.5"]
    assert [r.getMessage() for r in caplog.records] == [
        "answer keys: comparison cap (2) reached; some keys stay apart"]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tts.answers.equivalence"):
        assert AnswerKeys(max_pairs=1).keys(answers) == ["0.5", "0.5", "0.50000001"]
        assert AnswerKeys(max_pairs=3).keys(answers) == ["0.5", "0.5", "0.5"]
    assert [r.getMessage() for r in caplog.records] == [
        "answer keys: comparison cap (1) reached; some keys stay apart"]


def test_a_comparison_that_fails_keeps_the_keys_apart_is_logged_and_not_retried(monkeypatch, caplog):
    calls = []

    class Broken:
        @staticmethod
        def verify(gold, answer, **kwargs):
            calls.append(1)
            raise RuntimeError("sympy broke")

    monkeypatch.setattr(equivalence, "_math_verify", lambda: Broken)
    keys = AnswerKeys()
    with caplog.at_level(logging.DEBUG, logger="tts.answers.equivalence"):
        assert keys.keys(["0.5", "\\frac{1}{\\sqrt{4}}"]) == ["0.5", "\\frac{1}{\\sqrt{4}}"]
    (record,) = caplog.records
    assert record.getMessage() == "math-verify could not compare '0.5' and '\\\\frac{1}{\\\\sqrt{4}}'"
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert keys.keys(["0.5", "\\frac{1}{\\sqrt{4}}"]) == ["0.5", "\\frac{1}{\\sqrt{4}}"] and calls == [1]


def test_an_unreadable_answer_does_not_stop_the_grouping_of_the_others():
    assert AnswerKeys().keys(["hello", "0.5", "\\frac{1}{2}"]) == ["hello", "0.5", "0.5"]


def test_keys_up_to_max_len_are_compared_and_longer_ones_not():
    assert AnswerKeys(max_len=3).keys(["0.5", "1/2"]) == ["0.5", "0.5"]
    assert AnswerKeys(max_len=2).keys(["0.5", "1/2"]) == ["0.5", "1/2"]


def test_percentages_and_matrices_are_compared_as_math_verify_reads_them():
    assert len(set(AnswerKeys().keys(["50\\%", "0.5"]))) == 1  # math-verify reads 50% as 0.5 too
    assert len(set(AnswerKeys().keys(["50\\%", "50"]))) == 1  # and as 50: no numeric shortcut for percentages
    assert len(set(AnswerKeys().keys(["\\begin{pmatrix}1\\\\2\\end{pmatrix}", "(1,2)"]))) == 1


@pytest.mark.parametrize("answer, form", [
    ("17+25=42", "42"), ("40+2", "42"), ("6*7", "42"), ("(3+5)/2", "4"), ("0.5+0.5", "1"),
    ("2**3", "2**3"), ("7//2", "7//2"), ("8//2", "8//2"), ("1/3+1/3", "1/3+1/3"), ("10/4", "10/4"),
    ("007", "007"), ("-5", "-5"), ("3-", "3-"),
])
def test_a_computation_on_numbers_votes_as_its_integer_value_and_nothing_else_changes(answer, form):
    vote_form.cache_clear()  # computed here, not remembered from another test
    assert vote_form(answer) == form


def test_an_answer_is_compared_by_the_value_it_states_not_its_markup():
    """Bold markup is dropped before parsing: ``**\\sqrt{8}**`` is read as its key ``\\sqrt{8}``."""
    assert len(set(AnswerKeys().keys(["**\\sqrt{8}**", "2\\sqrt{2}"]))) == 1


def test_keys_up_to_max_len_characters_are_compared_and_longer_ones_kept_apart():
    at_limit = "0." + "5" + "0" * 97  # 100 characters: 1/2
    assert len(at_limit) == AnswerKeys().max_len == 100
    assert AnswerKeys().keys(["1/2", at_limit]) == ["1/2", "1/2"]
    over = at_limit + "0"
    assert AnswerKeys().keys(["1/2", over]) == ["1/2", over]


def test_a_value_of_more_than_200_expression_nodes_is_not_handed_to_math_verify():
    import sympy

    xs = sympy.symbols("x0:200")
    assert equivalence._tame(sympy.Add(*xs[:199]))  # 200 nodes: the sum and its 199 terms
    assert not equivalence._tame(sympy.Add(*xs))    # 201


def test_a_percentage_votes_with_its_number_and_its_fraction_as_math_verify_says():
    # math-verify reads "50\\%" as equal to both 50 and 0.5; the numeric shortcut must not split
    # them by evaluating the percentage itself.
    assert AnswerKeys().keys(["50\\%", "50", "0.5"]) == ["50\\%"] * 3


@pytest.mark.parametrize("written", ["(5)", "+5", "(-3)"])
def test_a_plain_number_is_not_read_as_a_computation(written):
    # vote_form evaluates computations ("40+2" -> "42") only: a bracketed or signed number stays as
    # written (math-verify merges it with its value later, keyed by whichever came first).
    assert vote_form(written) == written
    assert vote_form("40+2") == "42"


def test_a_computation_longer_than_60_characters_is_left_as_written():
    long = "+".join(["1"] * 31)  # 61 characters
    assert vote_form(long) == long and vote_form("+".join(["1"] * 30)) == "30"


def test_one_call_makes_at_most_max_pairs_fresh_comparisons_then_keys_stay_apart():
    # 23 different expressions take 23 * 22 / 2 = 253 comparisons (no numeric shortcut: they have a
    # variable); "4+x" then meets the groups of x+1, x+2, x+3 (254-256) before its equal x+4, the
    # 257th comparison: past the default cap of 256, so it stays apart; a cap of 257 merges it.
    answers = [f"x+{k}" for k in range(1, 24)] + ["4+x"]
    assert AnswerKeys().keys(answers)[-1] == "4+x"
    assert AnswerKeys(max_pairs=257).keys(answers)[-1] == "x+4"
