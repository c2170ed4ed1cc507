"""Free-text answers: the final text of a reply, and the minimum-Bayes-risk choice among replies."""

from __future__ import annotations

import pytest

from tts.answers.free_text import MBRChoice, chrf_similarity, mbr_select, text_answer


@pytest.mark.parametrize(("reply", "answer"), [
    ("  Rain taps on the roof.\n", "Rain taps on the roof."),
    ("<think>\nwater from clouds\n</think>\n\nRain taps on the roof.", "Rain taps on the roof."),
    ("reasoning left open by the template</think> Rain.", "Rain."),           # only the closing tag
    ("<think>a</think> Close with </think>.", "Close with </think>."),         # the FIRST </think> ends it
    ("<think>\nstill thinking when max_tokens cut it", None),                   # unclosed: all thought
    ("\n  <think>\nstill thinking after a blank line", None),                   # ... after leading space too
    ("<think>done</think>   \n", None),                                         # nothing after the thought
    ("", None),
    ("   ", None),
])
def test_text_answer_is_the_text_after_the_thinking_section(reply, answer):
    assert text_answer(reply) == answer


def test_mbr_refuses_an_empty_list_with_a_clear_message():
    with pytest.raises(ValueError, match="^mbr_select needs at least one text to choose from, got none$"):
        mbr_select([])


def test_one_text_is_chosen_with_full_utility():
    assert mbr_select(["Rain."]) == MBRChoice(0, (1.0,))


def test_the_consensus_text_beats_the_outlier_and_utilities_are_in_the_unit_interval():
    texts = ["The cat sat on the warm mat.", "Stock prices fell sharply today.",
             "A cat sat on the mat.", "The cat was sitting on a mat."]
    choice = mbr_select(texts)
    assert choice.index in (0, 2, 3)
    assert len(choice.utilities) == 4 and all(0.0 <= u <= 1.0 for u in choice.utilities)
    assert choice.utilities[1] == min(choice.utilities)
    assert choice.utilities[choice.index] == max(choice.utilities)


def test_a_text_written_by_most_samples_wins_and_ties_go_to_the_earliest():
    assert mbr_select(["Snow.", "Rain falls.", "Rain falls.", "Sun."]).index == 1
    tied = mbr_select(["Rain falls.", "Rain falls."])
    assert tied.index == 0 and tied.utilities == (1.0, 1.0)


def test_the_candidate_is_not_its_own_reference():
    """A text that is far from every other text scores low whatever its own weight."""
    texts = ["Rain falls.", "Rain is falling.", "Quantum chromodynamics."]
    heavy_on_outlier = mbr_select(texts, [1.0, 1.0, 100.0])
    assert heavy_on_outlier.utilities[2] < 0.2
    # ...but its weight as a reference still counts for the others (chrF against it, weight 100)
    plain = mbr_select(texts)
    assert heavy_on_outlier.utilities[0] < plain.utilities[0]


def test_weights_validated_and_all_zero_means_uniform():
    texts = ["Rain falls.", "Rain is falling.", "Sun shines."]
    with pytest.raises(ValueError, match="one weight per text"):
        mbr_select(texts, [1.0, 2.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        mbr_select(texts, [1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        mbr_select(texts, [1.0, float("nan"), 1.0])
    assert mbr_select(texts, [0.0, 0.0, 0.0]) == mbr_select(texts)


def test_a_candidate_whose_references_all_weigh_zero_has_no_support():
    choice = mbr_select(["Rain falls.", "Rain is falling.", "Sun shines."], [1.0, 0.0, 0.0])
    assert choice.utilities[0] == 0.0 and choice.index == 1  # 1 is closest to the only weighted text


def test_empty_texts_score_zero_so_an_answer_beats_silence():
    assert chrf_similarity("", "") == 0.0
    choice = mbr_select(["", "", "Rain falls.", "Rain falls down."])
    assert choice.index in (2, 3) and choice.utilities[:2] == (0.0, 0.0)
