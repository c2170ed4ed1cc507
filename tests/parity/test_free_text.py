"""Parity: choosing among free-text replies, by minimum Bayes risk (chrF) and by universal self-consistency.

* MBR (Kumar & Byrne 2004; sampling-based MBR as in Freitag et al. 2022 and Bertsch et al. 2023):
  the chosen hypothesis maximises the expected utility against the samples used as
  pseudo-references, E_j[u(h_i, y_j)], here with u = sentence chrF (sacrebleu) of the hypothesis
  against the reference, over the OTHER samples, weighted by each reference's weight (Jinnai et
  al. 2024's model-based estimate: a score per reference instead of counting each once). The
  expected values below come from sacrebleu itself, called here, not from tts.
* USC (Chen et al. 2023, arXiv:2311.17311, Figure 2): n sampled responses, then one prompt that
  shows the question and the responses as "Response 0: ...", "Response 1: ...", and asks for the
  most consistent one by majority consensus, answered as "The most consistent response is
  Response X"; the answer is response X.
"""

from __future__ import annotations

import pytest
from sacrebleu.metrics import CHRF

from tts.answers.free_text import mbr_select
from tts.backends.function import FunctionGenerator
from tts.config import SamplingConfig
from tts.search.sampling.usc import UniversalSelfConsistency, UscConfig
from tts.types import Problem

PINNED = {"strategy:usc"}

# Two clusters: three ways of saying it rained on the roof all night, two of saying rain comes from clouds.
TEXTS = [
    "Rain fell on the roof all night.",
    "The rain fell all night on the roof.",
    "All night the rain fell on our roof.",
    "Rain is water falling from clouds.",
    "Water falls from the clouds as rain.",
]


def reference_mbr(texts, weights):
    """E_j[chrF(h_i, y_j)] over j != i with weights w_j, from sacrebleu's sentence chrF; the argmax."""
    chrf = CHRF()
    n = len(texts)
    utilities = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        total = sum(weights[j] * chrf.sentence_score(texts[i], [texts[j]]).score / 100 for j in others)
        utilities.append(total / sum(weights[j] for j in others))
    return max(range(n), key=lambda i: utilities[i]), utilities


def test_mbr_picks_the_text_with_the_highest_mean_chrf_against_the_others():
    expected_index, expected = reference_mbr(TEXTS, [1.0] * len(TEXTS))
    choice = mbr_select(TEXTS)
    assert choice.utilities == pytest.approx(expected, abs=1e-12)
    assert choice.index == expected_index == 1  # the roof cluster, and its most central member
    # The utility is chrF of the candidate against the reference (recall-weighted, not symmetric):
    # scoring the other way round would choose text 0.
    reverse = [sum(CHRF().sentence_score(TEXTS[j], [TEXTS[i]]).score / 100 for j in range(5) if j != i) / 4
               for i in range(5)]
    assert max(range(5), key=lambda i: reverse[i]) == 0


def test_weights_on_the_references_move_the_choice_to_the_trusted_cluster():
    weights = [1.0, 1.0, 1.0, 4.0, 4.0]  # a verifier that trusts the clouds answers four times as much
    expected_index, expected = reference_mbr(TEXTS, weights)
    choice = mbr_select(TEXTS, weights)
    assert choice.utilities == pytest.approx(expected, abs=1e-12)
    assert choice.index == expected_index == 4


def test_mbr_with_exact_match_utility_is_the_majority_vote():
    """Bertsch et al. 2023: self-consistency is MBR with exact-match utility. With chrF, identical
    texts score 1 against each other, so a text written by most samples wins as the vote would."""
    texts = ["It rains.", "It is sunny.", "It rains.", "Snow falls.", "It rains."]
    assert mbr_select(texts).index == 0


def _Model(replies, selection):  # noqa: N802 - reads as the fake model it builds
    """Samples come from ``replies`` in order; a selection request gets ``selection``."""
    return FunctionGenerator(lambda r: selection if r.messages and "most consistent" in r.messages[-1].content
                             else replies)


def test_usc_shows_the_papers_prompt_and_returns_the_response_it_names():
    replies = ["Rain is wet.", "Rain falls from clouds.", "Rain falls from the clouds.", "Sunny."]
    model = _Model(replies, "The most consistent response is Response 2")
    usc = UniversalSelfConsistency(UscConfig(n=4), model, lambda p: (), SamplingConfig(max_tokens=32))
    sol = usc.solve([Problem("r", "Where does rain come from?")])[0]
    (draw,), (select,) = model.calls
    assert draw.n == 4
    assert select.n == 1 and select.temperature == 0.0 and len(select.messages) == 1
    assert select.messages[0].content == (
        "I have generated the following responses to the question: Where does rain come from?\n\n"
        "Response 0: Rain is wet.\n\n"
        "Response 1: Rain falls from clouds.\n\n"
        "Response 2: Rain falls from the clouds.\n\n"
        "Response 3: Sunny.\n\n"
        "Evaluate these responses.\n"
        "Select the most consistent response based on majority consensus.\n"
        'Start your answer with "The most consistent response is Response X" (without quotes).')
    assert sol.answer == "Rain falls from the clouds." and sol.trace.selected == 2
    assert sol.trace.notes["usc"] == "The most consistent response is Response 2"
