"""The frozen values' arithmetic: Usage.total is the sum that ``+`` gives, built once."""

from __future__ import annotations

import random

from tts.types import RequestShape, Usage


def test_usage_total_equals_adding_in_order_to_the_last_bit():
    rng = random.Random(3)
    usages = [Usage(prompt_tokens=rng.randrange(500), cached_prompt_tokens=rng.randrange(50),
                    completion_tokens=rng.randrange(300), wall_seconds=rng.random() / 7, calls=1,
                    shapes=(RequestShape(i, 0, (i + 1, i + 2)),) * (i % 3), reasoning_tokens=rng.randrange(9))
              for i in range(40)]
    added = Usage()
    for u in usages:
        added = added + u
    assert Usage.total(usages) == added  # wall_seconds too: the same left fold, not a compensated sum
    assert Usage.total(tuple(usages[:1])) == usages[0] and Usage.total([]) == Usage()
