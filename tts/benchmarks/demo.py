"""The built-in ``demo`` benchmark: small-number arithmetic problems, generated offline.

Made for the embedded SmolLM2-135M, and measured on it (see ``make demo``). Two kinds alternate:

* one-step word problems ("Mia has 4 coins. Mia gets 3 more coins. How many ...?"): the model is
  right about 70% of the time per sample;
* three single-digit addends ("What is 3 + 8 + 5?"): right about 25% of the time per sample, but
  its mistakes scatter over many wrong sums while the right one recurs, so majority voting
  roughly doubles accuracy at n = 16.

The mix gives a benchmark with a real spread of difficulty, which is what compute allocation
needs. Problems come from a seeded generator, so the set is identical on every machine. The
prompt shows worked examples of both kinds ending in "The answer is N.", which the model imitates;
grading is the standard grader, unchanged.
"""

from __future__ import annotations

import random
from typing import ClassVar

from tts.benchmarks.datasets import GeneratedBenchmark
from tts.prompts import PromptTemplate
from tts.types import Problem

NAMES = ("Tom", "Anna", "Sam", "Mia", "Ben", "Lily", "Max", "Zoe", "Leo", "Ava", "Noah", "Emma")
THINGS = ("apples", "pens", "books", "coins", "stickers", "marbles", "cookies", "cards", "shells", "toys")

DEMO_PROMPT = PromptTemplate(
    few_shot=(
        ("Sara has 5 pencils. Sara gets 3 more pencils. How many pencils does Sara have now?",
         "Sara has 5 + 3 = 8 pencils. The answer is 8."),
        ("What is 2 + 3 + 4?", "2 + 3 = 5, 5 + 4 = 9. The answer is 9."),
        ("Jack has 4 stones. Jack gets 2 more stones. How many stones does Jack have now?",
         "Jack has 4 + 2 = 6 stones. The answer is 6."),
        ("What is 5 + 1 + 6?", "5 + 1 = 6, 6 + 6 = 12. The answer is 12."),
    ),
)


def generate_problems(count: int, seed: int = 0) -> list[Problem]:
    """``count`` problems alternating one-step word problems and three-addend sums (digits 1-9)."""
    rng = random.Random(seed)
    problems = []
    for i in range(count):
        if i % 2 == 0:
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            name, thing = rng.choice(NAMES), rng.choice(THINGS)
            question = f"{name} has {a} {thing}. {name} gets {b} more {thing}. How many {thing} does {name} have now?"
            problems.append(Problem(f"demo-{i:03d}", question, str(a + b), {"kind": "word", "steps": 1}))
        else:
            a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
            problems.append(Problem(f"demo-{i:03d}", f"What is {a} + {b} + {c}?", str(a + b + c),
                                    {"kind": "sum3", "steps": 2}))
    return problems


class DemoBenchmark(GeneratedBenchmark):
    """Built-in, deterministic, offline: 100 problems by default (``--limit`` takes fewer)."""

    name = "demo"
    size: ClassVar[int] = 100
    prompt = DEMO_PROMPT
    generate = staticmethod(generate_problems)
