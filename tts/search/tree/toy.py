"""A toy search space with a known optimum, for checking search algorithms without an LLM.

States are digit strings in base ``base``, one search per hidden target string; a string as long
as its target is terminal and worth the number of positions where it matches the target. The
optimum is the target itself, and the value of the best completion of a prefix (the reward-to-go
a perfect process verifier would predict) is known exactly, so :class:`PerfectScorer` is a
perfect verifier and :class:`RandomScorer` a useless one.

Children are drawn the way a model samples: the k children of a state are k consecutive digits
(mod ``base``) from a random start, seeded by (seed, root, prefix, how often the prefix was
expanded), so asking for ``k >= base`` children covers every digit.

Example:
    >>> from tts.search.tree.beam import beam_search
    >>> space = DigitSpace(["3102"], base=4)
    >>> [result] = beam_search(space, PerfectScorer(space), n=16, beam_width=4)
    >>> max(result.leaf_nodes, key=lambda node: node.score).state.digits
    '3102'
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tts.verifiers.base import VerifierScore


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


@dataclass(frozen=True, slots=True)
class Digits:
    """A state of the toy space: which search (root) it belongs to, and its digits so far."""

    root: int
    digits: str = ""


class DigitSpace:
    """Digit strings growing one digit per step towards a hidden target per root.

    Args:
        targets: One hidden target per root (digits ``0 .. base-1``); its length is the depth.
        base: Digits per position (children of one expansion are distinct up to ``base``).
        seed: Changes every draw.

    Attributes:
        expand_calls: Number of :meth:`expand` calls so far (batching tests count them).
    """

    def __init__(self, targets: Sequence[str], base: int = 4, seed: int = 0) -> None:
        if not 2 <= base <= 10:
            raise ValueError(f"base must be between 2 and 10, got {base}")
        for t in targets:
            if not t or any(not c.isdigit() or int(c) >= base for c in t):
                raise ValueError(f"target {t!r} must be a non-empty string of digits below {base}")
        self.targets = list(targets)
        self.base = base
        self.seed = seed
        self.expand_calls = 0
        self._expanded: dict[Digits, int] = {}

    def initial_states(self) -> list[Digits]:
        """An empty string per target."""
        return [Digits(i) for i in range(len(self.targets))]

    def expand(self, states: Sequence[Digits], counts: Sequence[int]) -> list[list[Digits]]:
        """``counts[i]`` one-digit extensions of each state (consecutive digits from a random start)."""
        self.expand_calls += 1
        out = []
        for state, k in zip(states, counts, strict=True):
            draw = self._expanded.get(state, 0)
            self._expanded[state] = draw + 1
            start = _rng(self.seed, state.root, state.digits, draw).randrange(self.base)
            out.append([Digits(state.root, state.digits + str((start + i) % self.base)) for i in range(k)])
        return out

    def is_terminal(self, state: Digits) -> bool:
        """A string as long as its target is finished."""
        return len(state.digits) >= len(self.targets[state.root])

    def value(self, state: Digits) -> int:
        """Positions where the digits match the target (the value of a finished string)."""
        return sum(a == b for a, b in zip(state.digits, self.targets[state.root], strict=False))

    def best_value(self, state: Digits) -> int:
        """Value of the best completion of ``state``: its matches plus every position still open."""
        return self.value(state) + len(self.targets[state.root]) - len(state.digits)


class PerfectScorer:
    """A perfect verifier: the best achievable value of a state, normalised to [0, 1]."""

    name = "perfect"

    def __init__(self, space: DigitSpace) -> None:
        self.space = space
        self.calls = 0

    def score(self, states: Sequence[Digits]) -> list[VerifierScore | None]:
        """Exact reward-to-go of every state."""
        self.calls += 1
        return [VerifierScore((), self.space.best_value(s) / len(self.space.targets[s.root])) for s in states]


class RandomScorer:
    """A useless verifier: a uniform random score per state (seeded; repeated states differ)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.calls = 0

    def score(self, states: Sequence[Digits]) -> list[VerifierScore | None]:
        """Noise."""
        self.calls += 1
        rng = _rng("random-scorer", self.seed, self.calls)
        return [VerifierScore((), rng.random()) for _ in states]
