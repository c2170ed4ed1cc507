"""The LLM judge: an LLM says whether a solution (or a step) is correct.

Two ways to read the verdict:

* **first-token probability** (default): ask "Is this solution correct? Answer Yes or No." and
  read P("Yes") from the top logprobs of the judge's first generated token, normalised by the
  Yes + No mass. One prefill and one decoded token per judged text (the "LLM-as-a-judge"
  probability score; Zheng et al. 2023, "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena").
  Departure from GenRM's direct verifier (Zhang et al. 2024; Singhi et al.'s ``extract_P_yes``),
  which scores by the raw P(Yes) (1 - P(No) when Yes is not among the top tokens): a policy model
  that is not fine-tuned to answer Yes/No puts varying mass on other first tokens ("The", "Let"),
  and the raw P(Yes) would then rank texts by that mass rather than by Yes against No.
  ``yes_probability="raw"`` gives the reference rule.
* **votes** (``votes > 0``): GenRM-style (Zhang et al. 2024, "Generative Verifiers: Reward
  Modeling as Next-Token Prediction"): sample V verdicts with reasoning at a temperature and
  score by the share that end in Yes. It spends far more tokens and suits judges that must think
  before they answer. Only a *trailing* verdict counts (:func:`final_verdict`): GenRM's verifiers
  answer at the end of their rationale, and Singhi et al. (2025) read the verdict there. A reply
  cut off at ``max_tokens`` or without a trailing Yes/No has no verdict: it is left out of the
  share (the mean of the valid verdicts, as Singhi et al.'s ``get_solution_score``) and counted in
  the score's ``invalid``.

The judge is the policy model by default (the generator the search already has), or a model of
its own (``backend``). Every ``score()`` call sends all the texts it must judge, of all items, to
the generator in ONE ``generate`` call. Verdicts are remembered per judged text, so a step judged
in an earlier search round costs nothing again (``reuse_verdicts``). A text with no verdict at all
(no Yes/No first token; no sampled reply with a trailing verdict) scores 0.5; every reply without
a verdict is counted in ``invalid``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.backends.base import GenerationRequest, GenerationResult, Generator, Message
from tts.config import BackendConfig, VerifierConfigBase
from tts.types import Usage
from tts.verifiers.base import VerifierScore, VerifyItem, aggregate, clean_score

logger = logging.getLogger(__name__)


class JudgeConfig(VerifierConfigBase):
    """Ask an LLM whether each solution (or each step) is correct; score P(Yes)."""

    kind: Literal["judge"] = "judge"
    per_step: bool = False
    """Judge every step (is the last step of the solution so far correct?) and aggregate the
    step verdicts with ``aggregation``; False judges the whole (partial) solution once."""
    votes: int = Field(0, ge=0, le=64)
    """0: read P(Yes) from the first token's logprobs. V > 0: sample V reasoned verdicts at
    ``temperature`` and score by the share of those with a trailing verdict that end in Yes
    (GenRM majority; replies cut off or without a verdict are left out and counted invalid)."""
    yes_probability: Literal["normalized", "raw"] = "normalized"
    """How the first token's logprobs give the score (votes = 0): ``normalized`` P(Yes) / (P(Yes) +
    P(No)); ``raw`` P(Yes) itself, or 1 - P(No) when no Yes token is among the top logprobs, as
    GenRM (Zhang et al. 2024) and Singhi et al.'s ``extract_P_yes`` read it."""
    top_logprobs: int = Field(10, ge=2, le=20)
    """First-token alternatives read for P(Yes) (Yes and No must both be among them to compare)."""
    temperature: float = Field(0.7, gt=0.0, le=2.0)
    """Sampling temperature of reasoned verdicts (votes > 0 only)."""
    max_tokens: int = Field(256, ge=8)
    """Most tokens of one reasoned verdict (votes > 0 only)."""
    backend: BackendConfig | None = None
    """The judge's own model; None judges with the policy's generator."""
    system: str | None = None
    """Optional system message of the judge prompt."""
    solution_question: str = Field("Is this solution correct?", min_length=1)
    """The question asked of a whole (or partial) solution."""
    step_question: str = Field("Is the last step of this solution correct?", min_length=1)
    """The question asked of each step (``per_step``)."""
    answer_instruction: str = Field("Answer Yes or No.", min_length=1)
    """How the judge must answer when its first token is read (votes = 0)."""
    votes_instruction: str = Field("Check it briefly, then end your reply with Yes or No.", min_length=1)
    """How the judge must answer when it reasons first (votes > 0)."""
    verdict_prefix: str = ""
    """Text placed at the start of the judge's reply before its first token is read (e.g.
    "Verdict:"), for models that do not answer Yes/No at once. Empty: none."""
    reuse_verdicts: bool = True
    """Remember verdicts per judged text within this verifier, so that prefixes re-scored in
    later search rounds cost nothing. False: judge every text every time."""


# A "Yes/No" (or "yes or no") pair is the prompt's question echoed, never a verdict.
_YES_NO_PAIR = re.compile(r"\(?\s*\b(?:yes\s*(?:/|\bor\b|\|)\s*no|no\s*(?:/|\bor\b|\|)\s*yes)\b\s*\)?", re.IGNORECASE)
# The line ends with the verdict word ("... No.", "**Yes**", "\boxed{Yes}").
_ENDS_WITH = re.compile(r"\b(yes|no)\b[\W_]*$", re.IGNORECASE)
# A labelled verdict: "Verdict: Yes", "Answer: no", "Is the answer correct? Yes, ...".
_LABELLED = re.compile(r"\b(?:verdict|answer|judge?ment|correct)\b[\s*_]*[:?][\W_]*?\b(yes|no)\b", re.IGNORECASE)
# The line opens with the verdict as a word of its own: "Yes, the solution is correct: ..." ("No error" is not one).
_OPENS_WITH = re.compile(r"^[\W_]*(yes|no)(?:[\W_]*$|\s*[,.;:!\u2013\u2014-])", re.IGNORECASE)
_STRIP = " \t\n\r.,:;!?\"'*`()[]"
_CACHE_LIMIT = 100_000


def p_yes(top_logprobs: Mapping[str, float] | None, normalized: bool = True) -> float | None:
    """P(Yes) / (P(Yes) + P(No)) from a first token's top logprobs; None when neither appears.

    Tokens count as Yes (No) when they read "yes" ("no") after stripping spaces and
    punctuation and lower-casing (" Yes", "YES", "yes."). ``normalized=False``: the raw P(Yes),
    or 1 - P(No) when no Yes token is among them (GenRM's reading).

    Example:
        >>> round(p_yes({"Yes": math.log(0.6), " yes": math.log(0.1), "No": math.log(0.1)}), 3)
        0.875
        >>> round(p_yes({"Yes": math.log(0.6), " yes": math.log(0.1), "No": math.log(0.1)}, normalized=False), 3)
        0.7
    """
    if not top_logprobs:
        return None
    mass = {"yes": 0.0, "no": 0.0}
    seen = set()
    for token, logprob in top_logprobs.items():
        word = token.strip(_STRIP).lower()
        if word in mass and math.isfinite(logprob):
            mass[word] += math.exp(logprob)
            seen.add(word)
    if not normalized:
        return mass["yes"] if "yes" in seen else 1.0 - mass["no"] if "no" in seen else None
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def final_verdict(text: str, finish_reason: str | None = None) -> bool | None:
    """The trailing verdict of a reasoned reply: True (Yes), False (No), or None (no verdict).

    Only the last non-empty line is read, as GenRM's verifiers put their verdict last (Zhang et al.
    2024) and Singhi et al. (2025) read it there. On that line, after dropping an echoed "Yes/No":
    a line ending in yes/no gives that word; else a labelled verdict ("Verdict: No", "correct? Yes,
    ..."), the last one; else a line that opens with "Yes" / "No" as a word of its own ("Yes, the
    solution is correct: there is no error." is Yes; "No error found" is no verdict). A reply cut
    off at the token limit (``finish_reason == "length"``) has no verdict, whatever it says.

    Example:
        >>> final_verdict("Yes, the solution is correct: there is no error.")
        True
        >>> final_verdict("3 + 4 is 7, not 8.\\n\\nVerdict: No"), final_verdict("Step 2 is fine, no issue", "length")
        (False, None)
    """
    if finish_reason == "length":
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    line = _YES_NO_PAIR.sub(" ", lines[-1])
    match = _ENDS_WITH.search(line)
    if match is None:
        labelled = _LABELLED.findall(line)
        if labelled:
            return labelled[-1].lower() == "yes"
        match = _OPENS_WITH.search(line)
    return match.group(1).lower() == "yes" if match else None


class LLMJudge:
    """Scores items by an LLM's verdict; see the module docstring.

    Args:
        config: Questions, verdict mode, per-step judging.
        generator: The judge model's generator (the policy's, or one built from
            ``config.backend``).
        owns_generator: Whether :meth:`close` should close the generator (one built for it).

    Example:
        >>> from tts.backends.scripted import ScriptedGenerator  # doctest: +SKIP
        >>> judge = LLMJudge(JudgeConfig(), ScriptedGenerator({"p": {"4": 0.8}}))  # doctest: +SKIP
    """

    name: ClassVar[str] = "judge"
    config_class: ClassVar[type[JudgeConfig]] = JudgeConfig

    @property
    def step_verifier(self) -> bool:
        """Judging each step (``per_step``): whole solutions reach it cut into steps
        (tts.search.base.solution_item); otherwise it reads the whole text as one step."""
        return self.config.per_step

    def __init__(self, config: JudgeConfig, generator: Generator, owns_generator: bool = False) -> None:
        self.config = config
        self.generator = generator
        self.owns_generator = owns_generator
        # judged text -> (score, invalid); verdicts of texts judged before (reuse_verdicts)
        self._verdicts: dict[tuple[Any, ...], tuple[float, int]] = {}

    @classmethod
    def from_config(cls, config: JudgeConfig, generator: Generator | None) -> LLMJudge:
        """The policy's generator judges, unless the config names a backend of its own.

        Raises:
            ValueError: No backend in the config and no generator to judge with.
        """
        if config.backend is not None:
            from tts.backends.factory import create_generator

            return cls(config, create_generator(config.backend), owns_generator=True)
        if generator is None:
            raise ValueError("the judge needs a model: pass the policy's generator, or give the judge config "
                             "a backend (e.g. {kind: judge, backend: {kind: vllm, model: ...}})")
        return cls(config, generator)

    # 1. what to judge ---------------------------------------------------------------------------

    def _targets(self, item: VerifyItem) -> list[tuple[tuple[str, ...], bool]]:
        """(steps shown, is a step verdict) of each text this item needs judged."""
        if not item.steps:
            return []
        if self.config.per_step:
            return [(item.steps[: i + 1], True) for i in range(len(item.steps))]
        return [(item.steps, False)]

    def _request(self, item: VerifyItem, steps: tuple[str, ...], step: bool) -> GenerationRequest:
        c = self.config
        label = "Solution" if item.finished and not step else "Solution so far"
        question = c.step_question if step else c.solution_question
        instruction = c.votes_instruction if c.votes else c.answer_instruction
        body = f"Problem:\n{item.problem.question}\n\n{label}:\n" + "\n".join(steps) + f"\n\n{question} {instruction}"
        messages = ((Message("system", c.system),) if c.system else ()) + (Message("user", body),)
        if c.votes:
            return GenerationRequest(messages, n=c.votes, temperature=c.temperature, max_tokens=c.max_tokens,
                                     key=item.problem.id, role="judge")
        return GenerationRequest(messages, n=1, temperature=0.0, max_tokens=1, top_logprobs=c.top_logprobs,
                                 continuation=c.verdict_prefix, key=item.problem.id, role="judge")

    # 2. reading a verdict ----------------------------------------------------------------------

    def _read(self, result: GenerationResult) -> tuple[float, int]:
        """(score, invalid) of one judged text."""
        if self.config.votes:
            # The mean of the valid verdicts; every reply without one (cut off, or no trailing Yes/No) counted.
            read = [final_verdict(c.text, c.finish_reason) for c in result.completions]
            verdicts = [v for v in read if v is not None]
            missing = len(read) - len(verdicts)
            if not verdicts:
                return 0.5, max(missing, 1)
            return sum(verdicts) / len(verdicts), missing
        first = result.completions[0] if result.completions else None
        raw = p_yes(first.first_token_top_logprobs if first else None, self.config.yes_probability == "normalized")
        if raw is None:
            return 0.5, 1
        value, bad = clean_score(raw)
        return (value, bad) if not bad else (0.5, 1)

    def _usage(self, usage: Usage) -> Usage:
        """A request's usage, its shapes labelled with the judge's model when it is not the policy's."""
        if not self.owns_generator:
            return usage
        model = getattr(self.generator, "model_name", "")
        return dataclasses.replace(usage, shapes=tuple(dataclasses.replace(s, model=model) for s in usage.shapes))

    # 3. scoring ---------------------------------------------------------------------------------

    def score(self, items: Sequence[VerifyItem]) -> list[VerifierScore]:
        """Judge every text of every item in one generate call; one score per item, in order."""
        keyed: list[list[tuple[Any, ...]]] = []
        pending: dict[tuple[Any, ...], GenerationRequest] = {}
        for item in items:
            keys = []
            for steps, step in self._targets(item):
                key = (item.problem.id, item.problem.question, steps, step, item.finished or step)
                keys.append(key)
                if key not in self._verdicts and key not in pending:
                    pending[key] = self._request(item, steps, step)
            keyed.append(keys)
        fresh: dict[tuple[Any, ...], tuple[float, int]] = {}
        charged: dict[tuple[Any, ...], Usage] = {}
        if pending:
            results = self.generator.generate(list(pending.values()))
            for key, result in zip(pending, results, strict=True):
                fresh[key] = self._read(result)
                charged[key] = self._usage(result.usage)
            if self.config.reuse_verdicts:
                if len(self._verdicts) + len(fresh) > _CACHE_LIMIT:
                    self._verdicts.clear()
                self._verdicts.update(fresh)
            invalid = sum(bad for _, bad in fresh.values())
            if invalid:
                logger.debug("judge: %d replies to %d judged texts had no verdict", invalid, len(fresh))
        out = []
        for item, keys in zip(items, keyed, strict=True):
            verdicts = [fresh.get(k) or self._verdicts[k] for k in keys]
            usage = Usage.total([charged.pop(k) for k in keys if k in charged])  # each request charged once
            scores = [v for v, _ in verdicts]
            invalid = sum(bad for _, bad in verdicts)
            if self.config.per_step:
                total, bad = clean_score(aggregate(scores, self.config.aggregation))
                out.append(VerifierScore(tuple(scores), total, usage, invalid + bad))
            else:
                total, bad = clean_score(scores[0]) if scores else (0.5, 0)
                out.append(VerifierScore((), total, usage, invalid + bad))
        return out

    def close(self) -> None:
        """Close the judge's own engine (never the policy's)."""
        if self.owns_generator:
            self.generator.close()
