"""Free-text answers: the final text of a reply, and minimum-Bayes-risk selection among replies.

Self-consistency votes over extracted answers, which exist only when replies end in a checkable
form (a boxed number, a tool call). "Write one sentence about rain" has no such form: no two
replies are equal, so a vote has nothing to count. Two established rules choose among free
texts instead; this module holds the one that needs no model:

* :func:`mbr_select`, minimum-Bayes-risk (MBR) selection. MBR (Kumar & Byrne 2004, "Minimum
  Bayes-Risk Decoding for Statistical Machine Translation", HLT-NAACL) returns the hypothesis with
  the highest expected utility against the model's distribution over outputs. Sampling-based MBR
  estimates that expectation with the model's own samples as pseudo-references (Eikema & Aziz
  2020; Freitag et al. 2022, "High Quality Rather than High Model Probability: Minimum Bayes Risk
  Decoding with Neural Metrics", TACL, where chrF is one of the utilities compared), and Bertsch
  et al. 2023 ("It's MBR All the Way Down: Modern Generation Techniques Through the Lens of
  Minimum Bayes Risk") show that self-consistency is the special case whose utility is exact
  answer match. Jinnai et al. 2024 ("Model-Based Minimum Bayes Risk Decoding for Text
  Generation", ICML, arXiv:2311.05263) weight the pseudo-references by a score instead of
  counting each sample once, which is what ``weights`` does here (a verifier's scores, as in a
  weighted vote).
* Universal self-consistency (the model itself picks the most consistent reply) is a strategy,
  ``usc`` in :mod:`tts.search.sampling.usc`, built on :func:`text_answer` and :func:`mbr_select`.

The utility is sentence-level chrF (Popović 2015, character n-gram F-score with beta = 2) as
sacrebleu computes it (``sacrebleu.metrics.CHRF().sentence_score(hyp, [ref]).score / 100``):
no model, robust to small wording changes, defined for any language. sacrebleu is imported on
first use, so importing tts stays fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tts.answers.reasoning import split_reasoning


@dataclass(frozen=True, slots=True)
class MBRChoice:
    """The outcome of :func:`mbr_select`.

    Args:
        index: Index of the chosen text (the highest expected utility; ties to the earliest).
        utilities: Each text's expected utility: its weighted mean chrF (in [0, 1]) against the
            other texts, one per text, in input order.
    """

    index: int
    utilities: tuple[float, ...]


def text_answer(text: str) -> str | None:
    """The answer of a free-text reply: its text after the thinking section, stripped.

    A reasoning model's thinking section is not its answer, so it is dropped by the one rule of
    :func:`tts.answers.reasoning.split_reasoning` (the thought ends at the first ``</think>``); a
    reply that opens ``<think>`` and never closes it (cut by ``max_tokens``) is all thought and has
    no answer. None when nothing is left.

    Example:
        >>> text_answer("<think>\\nrain is water\\n</think>\\n\\nRain taps on the roof. ")
        'Rain taps on the roof.'
        >>> text_answer("   ") is None
        True
    """
    return split_reasoning(text)[1].strip() or None


def _chrf() -> Any:
    from sacrebleu.metrics import CHRF  # a 0.15 s import: only when free text is chosen

    return CHRF()


# Wrapped, not decorated: mutmut mutates only undecorated functions (see tts.answers.extraction).
_chrf = lru_cache(maxsize=1)(_chrf)


def chrf_similarity(hypothesis: str, reference: str) -> float:
    """Sentence chrF of ``hypothesis`` against ``reference``, in [0, 1] (sacrebleu's score / 100).

    Not symmetric: chrF weighs recall of the reference's character n-grams twice as much as
    precision (beta = 2). An empty text scores 0 against anything, itself included.
    """
    return _chrf().sentence_score(hypothesis, [reference]).score / 100.0


def mbr_select(texts: Sequence[str], weights: Sequence[float] | None = None) -> MBRChoice:
    """Minimum-Bayes-risk choice among ``texts``: the one most similar, on average, to the others.

    The utility of candidate i is the weighted mean, over every OTHER text j, of
    ``chrf_similarity(texts[i], texts[j])`` with weight ``weights[j]``: the expected chrF of i
    against a reference drawn from the other samples. Leaving i out of its own references keeps a
    heavily weighted text from voting for itself; with uniform weights the choice is the same as
    with it included (Bertsch et al. include it: it adds the same 1/n to every utility).

    Args:
        texts: The candidate texts (usually :func:`text_answer` of each sample; None-free).
        weights: One non-negative weight per text (a verifier's scores for a weighted vote), used
            for the text as a reference; None weighs every text 1. All zero is treated as
            uniform (no evidence either way). A candidate whose other texts all weigh 0 has
            utility 0: no reference supports it.

    Returns:
        The chosen index (highest utility; ties to the earliest) and every text's utility. One
        text: index 0 with utility 1.0 (nothing to disagree with).

    Raises:
        ValueError: No texts, a weight per text missing, or a weight that is negative or not finite.

    Example:
        >>> mbr_select(["It rains.", "It is raining.", "The sun shines."]).index
        1
    """
    n = len(texts)
    if n == 0:
        raise ValueError("mbr_select needs at least one text to choose from, got none")
    if weights is None:
        w = [1.0] * n
    else:
        w = [float(x) for x in weights]
        if len(w) != n:
            raise ValueError(f"mbr_select got {len(w)} weights for {n} texts; give one weight per text (or None)")
        bad = [x for x in w if not math.isfinite(x) or x < 0]
        if bad:
            raise ValueError(f"mbr_select weights must be finite and >= 0 (a verifier's scores), got {bad[0]!r}")
        if sum(w) <= 0:
            w = [1.0] * n
    if n == 1:
        return MBRChoice(0, (1.0,))
    similarity: dict[tuple[str, str], float] = {}  # equal texts are common among samples
    utilities = []
    for i, hyp in enumerate(texts):
        mass = total = 0.0
        for j, ref in enumerate(texts):
            if j == i or w[j] == 0:
                continue
            key = (hyp, ref)
            if key not in similarity:
                similarity[key] = chrf_similarity(hyp, ref)
            total += w[j] * similarity[key]
            mass += w[j]
        utilities.append(min(1.0, max(0.0, total / mass)) if mass > 0 else 0.0)
    best = max(range(n), key=lambda k: (utilities[k], -k))
    return MBRChoice(best, tuple(utilities))
