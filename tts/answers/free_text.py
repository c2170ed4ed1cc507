"""PLACEHOLDER until the freetext branch lands (mbr_select, text_answer)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MBRChoice:
    index: int
    utilities: tuple[float, ...]


def mbr_select(texts: Sequence[str], weights: Sequence[float] | None = None) -> MBRChoice:
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    w = list(weights) if weights is not None else [1.0] * len(texts)
    utils = []
    for i, t in enumerate(texts):
        num = sum(w[j] * chrf.sentence_score(t, [r]).score / 100 for j, r in enumerate(texts) if j != i)
        den = sum(w[j] for j in range(len(texts)) if j != i)
        utils.append(num / den if den > 0 else 1.0)
    best = max(range(len(texts)), key=lambda i: (utils[i], -i))
    return MBRChoice(best, tuple(utils))
