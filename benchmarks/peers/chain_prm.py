"""tts's exact ``chain`` checker as a step scorer for the reference searches (search-and-learn, its_hub).

benchmarks/side_by_side.py compares tts's beam search and particle filtering with the reference
implementations on the ``chains`` benchmark, all scored by the same exact process verifier:
:class:`tts.verifiers.chain_check.ChainCheckVerifier`, which checks each worked step against the
operations the question lists. The references each have their own reward interface; the drivers
(``sal_beam_search.py``, ``its_hub_particle_filtering.py``) subclass it and delegate here, so the
glue is these few functions:

- :func:`split_steps`: a solution text into steps, as the references' PRMs cut it (on the blank
  line ``"\\n\\n"``, each step stripped, empty pieces dropped: a partial solution that ends with the
  separator has no empty last step);
- :func:`sal_scores`: search-and-learn's ``PRM.score(questions, outputs)`` shape, one list of step
  scores per output of every question;
- :func:`its_hub_scores`: its_hub's ``AbstractProcessRewardModel.ascore(prompt, responses)`` shape,
  one number per response, the step scores aggregated as tts's verifier aggregates them (``min``
  by default: one wrong step makes the chain wrong).

Only tts and the standard library are imported, so the module loads in the main environment
(search-and-learn's driver) and in its_hub's own virtual environment (its driver puts the
repository root on ``sys.path``; tts's verifier needs only pydantic there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tts.types import Problem
from tts.verifiers.base import VerifyItem, aggregate
from tts.verifiers.chain_check import ChainCheckConfig, ChainCheckVerifier

SEPARATOR = "\n\n"
"""The step separator of all three implementations here (tts's default, search-and-learn's stop
string, its_hub's ``step_token`` as side_by_side.py sets it)."""

EMPTY_SCORE = 0.0
"""Score of a solution without a single non-empty step: it ranks last (tts never sends such a
state to its verifier and ranks it last too)."""


def split_steps(text: str, separator: str = SEPARATOR) -> list[str]:
    """The non-empty steps of a (partial) solution, stripped, in order."""
    return [s.strip() for s in (text or "").split(separator) if s.strip()]


def step_scores(question: str, text: str, verifier: ChainCheckVerifier | None = None) -> list[float]:
    """tts's chain checker's score of every step of ``text`` as a solution of ``question``
    (``[EMPTY_SCORE]`` when it has no step)."""
    steps = split_steps(text)
    if not steps:
        return [EMPTY_SCORE]
    verifier = verifier or ChainCheckVerifier()
    return list(verifier.score([VerifyItem(Problem("q", question), tuple(steps))])[0].step_scores)


def sal_scores(questions: Sequence[str], outputs: Sequence[Sequence[str]],
               verifier: ChainCheckVerifier | None = None) -> list[list[list[float]]]:
    """search-and-learn's ``PRM.score`` result: for each question, for each of its outputs, the list
    of step scores (its beam search aggregates each list with its ``agg_strategy``)."""
    if len(questions) != len(outputs):
        raise ValueError(f"{len(questions)} questions but {len(outputs)} lists of outputs")
    verifier = verifier or ChainCheckVerifier()
    return [[step_scores(q, text, verifier) for text in texts] for q, texts in zip(questions, outputs, strict=True)]


def its_hub_scores(question_of: Mapping[str, str], prompt: str, responses: Sequence[str],
                   aggregation: str = "min", verifier: ChainCheckVerifier | None = None) -> list[float]:
    """its_hub's ``ascore(prompt, responses)`` result: one score per response, in [0, 1].

    Args:
        question_of: The chains question of every prompt its_hub may send (its particle filter
            passes the conversation flattened to one string, ``ChatMessages.to_prompt()``).
        prompt: That string.
        responses: The (partial) solutions, steps joined by the separator.
        aggregation: How the step scores make one (tts's verifier aggregations: min, last, prod, mean).
    """
    try:
        question = question_of[prompt]
    except KeyError:
        raise KeyError(f"its_hub scored a prompt the driver did not send: {prompt[-200:]!r}") from None
    verifier = verifier or ChainCheckVerifier(ChainCheckConfig(aggregation=aggregation))  # type: ignore[arg-type]
    return [float(aggregate(step_scores(question, r, verifier), aggregation)) for r in responses]
