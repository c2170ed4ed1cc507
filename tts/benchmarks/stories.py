"""The built-in ``stories`` benchmark: short stories with numeric facts, several questions each.

Made for sleep-time compute (:mod:`tts.graphs.notes`): every story (the shared context) is
followed by five questions, so notes written once about a story can serve all five. A question
is ``<story>\\n\\nQuestion: <query>``; the five problems of a story are consecutive, so
``--limit 20`` takes four whole stories.

Each story gives three people a count of one kind of thing each and then changes each count
once (gets more, or gives some away). The questions ask for a final count (three of them, each
one addition or subtraction away from the story's facts), a starting count (a look-up) and the
final total of two people (two changes and a sum). Stories come from a seeded generator, so the
set is identical on every machine; grading is the standard grader.
"""

from __future__ import annotations

import random
from typing import ClassVar

from tts.benchmarks.datasets import GeneratedBenchmark
from tts.benchmarks.demo import NAMES, THINGS
from tts.prompts import PromptTemplate
from tts.types import Problem

QUERIES_PER_STORY = 5

STORIES_PROMPT = PromptTemplate(
    few_shot=(
        ("Lucy has 6 shells. Omar has 2 pens. Lucy gets 3 more shells. Omar gives away 1 pen.\n\n"
         "Question: How many shells does Lucy have now?",
         "Lucy has 6 + 3 = 9 shells. The answer is 9."),
        ("Lucy has 6 shells. Omar has 2 pens. Lucy gets 3 more shells. Omar gives away 1 pen.\n\n"
         "Question: How many pens did Omar have at the start?",
         "Omar had 2 pens at the start. The answer is 2."),
    ),
)


def _story(rng: random.Random) -> tuple[str, list[tuple[str, str]]]:
    """One story and its (query, gold) pairs."""
    people = rng.sample(NAMES, 3)
    things = rng.sample(THINGS, 3)
    start = [rng.randint(2, 9) for _ in people]
    change = [rng.choice((1, -1)) * rng.randint(1, 4) for _ in people]
    change = [c if s + c >= 0 else -c for s, c in zip(start, change, strict=True)]
    facts = [f"{p} has {s} {t}." for p, s, t in zip(people, start, things, strict=True)]
    for p, c, t in zip(people, change, things, strict=True):
        facts.append(f"{p} gets {c} more {t}." if c > 0 else f"{p} gives away {-c} {t}.")
    end = [s + c for s, c in zip(start, change, strict=True)]
    queries = [(f"How many {t} does {p} have now?", str(e)) for p, t, e in zip(people, things, end, strict=True)]
    first = rng.randrange(3)
    queries.append((f"How many {things[first]} did {people[first]} have at the start?", str(start[first])))
    a, b = rng.sample(range(3), 2)
    queries.append((f"Together, how many things do {people[a]} and {people[b]} have now?", str(end[a] + end[b])))
    return " ".join(facts), queries


def generate_problems(count: int, seed: int = 0) -> list[Problem]:
    """``count`` questions, five per story, the stories drawn from ``seed``."""
    rng = random.Random(seed)
    problems: list[Problem] = []
    story_index = 0
    while len(problems) < count:
        story, queries = _story(rng)
        for k, (query, gold) in enumerate(queries):
            if len(problems) == count:
                break
            problems.append(Problem(f"story-{story_index:02d}-q{k}", f"{story}\n\nQuestion: {query}", gold,
                                    {"story": story_index, "query": k}))
        story_index += 1
    return problems


class StoriesBenchmark(GeneratedBenchmark):
    """Built-in, deterministic, offline: 20 stories x 5 questions (``--limit`` takes the first N)."""

    name = "stories"
    size: ClassVar[int] = 20 * QUERIES_PER_STORY
    prompt = STORIES_PROMPT
    generate = staticmethod(generate_problems)
