"""Tool-call voting: the most consistent next action of an agent, by a vote over sampled tool calls.

When a model answers with tool calls, self-consistency over the *calls* (not over free text) gives
an agent the action most samples agree on. The reference is its_hub's tool voting
(Red-Hat-AI-Innovation-Team/its_hub, ``its_hub/algorithms/self_consistency.py``: ``SelfConsistency``
with ``tool_vote="tool_hierarchical"``, its recommended mode). n replies are sampled in one request
that offers the tools (the backend renders them with the model's own chat template and reads the
calls back with its tool parser, :mod:`tts.backends.tool_calls`); the first tool call of each reply
is its vote, counted by (``match``):

* ``hierarchical`` (default; its_hub's ``tool_hierarchical``): first the tool names are counted and
  only the calls of the most common name (of every name tied for most) stay; then, among those,
  the argument sets are counted and only the calls of the most common set (sets tied for most)
  stay; the reply returned is one of those left (see ``ties``). ``name`` is the same vote (its
  earlier name here);
* ``name_and_arguments``: one flat vote over (name, arguments) pairs (tts's default before it
  followed its_hub: a tool called with scattered arguments can lose to a rarer tool whose calls all
  agree).

As in its_hub, the chosen reply is returned whole: all its calls (a parallel call stays parallel).
``votes_on="all_calls"`` compares every call of a reply instead of the first (the names of all
calls, then all their arguments), for parallel calls whose later calls differ.

Departures from its_hub, on purpose (each has the setting that gives its_hub's rule):

* arguments are normalised before they are compared (keys sorted, strings trimmed, whitespace
  collapsed and case-folded, 2.0 == 2), so that ``" paris "`` and ``"Paris"`` are one call;
  its_hub compares them exactly (key order ignored): ``normalize_arguments=False``;
* a tie left after both counts goes to the call seen first (reproducible, like every tts vote);
  its_hub draws one at random: ``ties="random"`` (drawn with the run's seed and the problem id);
* tts checks the calls against the offered tools, so a call to a tool that was not offered, a
  required argument missing or arguments that do not parse vote for nothing; its_hub takes the
  engine's parsed ``tool_calls`` unchecked (unparseable arguments count as ``{}``). No setting: the
  check is what keeps a malformed call from being returned;
* as in its_hub, when fewer than half of the replies hold a valid call the replies in text decide
  (on BFCL's irrelevance questions a vote over the calls of a calling minority fell from 0.85 to
  0.60); tts chooses among them by the answer kind: free text by minimum Bayes risk
  (:func:`tts.search.base.select_text`), other answers by a vote, where its_hub counts equal
  contents. ``text_fallback=False`` answers None instead, for ``tool_choice: "required"``.

* a reply that only repeats calls whose results are already in the conversation abstains
  (``repeated_calls="abstain"``, event ``repeated_tool_call``): small models often call the same
  tool again after its result instead of answering, which loops an agent until its turn limit.
  On Qwen2.5-Coder-1.5B, after a ``get_time`` result, 2 of 4 samples repeated the call and 2
  answered in text ("The time in Tokyo right now is 14:05."); its_hub's rule (half of the replies
  call, so the calls vote) returns the repeat, this one the answer. The rule is the one every
  strategy that takes tools follows (:mod:`tts.search.repeats`): a text answer or a new call wins
  over a repeat, and only when no other reply answers is the repeat the replies agree on returned
  (event ``only_repeated_tool_calls``), never an empty reply. its_hub counts repeats like any
  call: ``repeated_calls="vote"``.

A reply without a usable call votes for nothing: no call, JSON that does not parse, arguments that
are not an object, a tool that is not offered, or a required argument missing. Such replies are
counted (events ``malformed_tool_call`` and ``no_tool_call``), never raised; the confidence is the
winner's share of all n replies.

Convention shared with ``tts serve``: the OpenAI-format tools come in ``Problem.metadata["tools"]``
and the chat so far, if any, in ``Problem.metadata["messages"]`` (rendered by the prompt function,
:func:`tts.prompts.chat_prompt`). The answer is the chosen reply's calls as the canonical JSON list
``[{"name": ..., "arguments": {...}}, ...]`` (argument keys sorted;
:func:`tts.backends.tool_calls.calls_answer`), the text chosen by the fallback, or None.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from tts.answers.kinds import call_key
from tts.backends.base import GenerationRequest, derive_seed
from tts.backends.tool_calls import MALFORMED, NO_CALL, calls_answer
from tts.answers.kinds import is_free_text
from tts.config import StopSetting, StrategyConfigBase
from tts.search.base import (
    BudgetUse,
    Strategy,
    StrategyInputError,
    completion_calls,
    prefix_usage,
    problem_tool_choice,
    problem_tools,
    stop_of,
    vote_keys,
    with_stop_record,
    with_tool_calls,
)
from tts.search.stopping import VoteStop, draw_until_settled
from tts.search.repeats import REPEATED, answered_calls, choose_past_repeats
from tts.types import Budget, RequestShape, Sample, Solution, Trace

__all__ = ["REPEATED", "ToolVote", "ToolVoteConfig", "answered_calls"]


class ToolVoteConfig(StrategyConfigBase):
    """Sample n replies, vote over their tool calls; returns the most consistent reply's calls as canonical JSON."""

    kind: Literal["tool_vote"] = "tool_vote"
    n: int = Field(8, ge=1, le=4096)
    """Replies sampled per request."""
    match: Literal["hierarchical", "name", "name_and_arguments"] = "hierarchical"
    """How calls vote: ``hierarchical`` (its_hub's ``tool_hierarchical``: the tool name first, then
    the arguments among the winning name's calls; ``name`` is the same vote), or
    ``name_and_arguments`` (one flat vote over name and arguments together; the earlier default)."""
    votes_on: Literal["first_call", "all_calls"] = "first_call"
    """What of a reply votes: its first call (its_hub), or all its calls in order (names, then
    arguments), for parallel calls."""
    normalize_arguments: bool = True
    """Compare arguments after normalising them (sorted keys, trimmed case-folded strings, 2.0 == 2);
    False compares them exactly, as its_hub does (key order still ignored)."""
    ties: Literal["first", "random"] = "first"
    """Which call wins a tie left after the vote: the first one seen (reproducible), or one drawn at
    random as its_hub does (seeded by the run's seed and the problem id)."""
    text_fallback: bool = True
    """When no reply holds a valid call, answer with the text the replies agree on (minimum Bayes
    risk over their texts); False answers None (``tool_choice: "required"``)."""
    repeated_calls: Literal["abstain", "vote"] = "abstain"
    """A reply whose calls all repeat calls the conversation already holds results for (same tool,
    same normalised arguments): ``abstain`` (it votes for nothing, as a reply without a call, so
    the replies that answer from the result or make a new call decide; when no other reply
    answers, the repeat is returned: :mod:`tts.search.repeats`), or ``vote`` (counted like any
    call, as its_hub does; for tools whose result changes between calls, such as polling a job)."""
    stop: StopSetting = None
    """Stop sampling replies once the vote over their calls is settled (:class:`tts.config.StopConfig`;
    the rule counts the keys this vote counts); None samples all ``n``."""


def _most_common(indices: list[int], keys: Sequence[str | None]) -> list[int]:
    """The indices (in order) whose key is among the most common keys of ``indices``."""
    counts: dict[str | None, int] = {}
    for i in indices:
        counts[keys[i]] = counts.get(keys[i], 0) + 1
    top = max(counts.values())
    return [i for i in indices if counts[keys[i]] == top]


class ToolVote(Strategy):
    """Vote over the first tool call of n sampled replies; see the module docstring."""

    name = "tool_vote"
    config_class: ClassVar[type[StrategyConfigBase]] = ToolVoteConfig
    budget_use = BudgetUse.WHOLE_SAMPLES
    pool_rule = None
    takes_tools: ClassVar[bool] = True

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        ns = self.samples_for(problems, budgets)
        if stop_of(self) is not None:
            return self._solve_until_settled(problems, ns)
        requests = [self._request(p, n) for p, n in zip(problems, ns, strict=True)]
        results = with_tool_calls(requests, self.generator.generate(requests))
        return [self._vote(p, r) for p, r in zip(problems, results, strict=True)]

    def _request(self, problem: Any, n: int, drawn: int = 0) -> GenerationRequest:
        return GenerationRequest(messages=self.prompt(problem), n=n, temperature=self.sampling.temperature,
                                 top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                                 seed=derive_seed(self.seed, problem.id, drawn), key=problem.id,
                                 tools=problem_tools(problem), tool_choice=problem_tool_choice(problem))

    def _solve_until_settled(self, problems: Sequence[Any], ns: Sequence[int]) -> list[Solution]:
        """Replies drawn in waves until the vote over their calls is settled (``config.stop``,
        :func:`tts.search.stopping.draw_until_settled`); the trace's ``notes["stop"]`` says how."""
        rules = [VoteStop(self.config.stop, n) for n in ns]

        def judge(i: int, completions: Sequence[Any]) -> str | None:
            samples, _ = self._samples(completions)
            return rules[i].check(self._stop_keys(samples))

        draws = draw_until_settled(self.generator, ns, self.config.stop,
                                   lambda i, k, drawn: self._request(problems[i], k, drawn), judge,
                                   prepare=completion_calls)
        return [with_stop_record(self._vote(p, d.result), d.record) for p, d in zip(problems, draws, strict=True)]

    def _stop_keys(self, samples: Sequence[Sample]) -> list[str | None]:
        """What a stop counts: the keys of the calls this vote counts when at least half of the
        replies call, else the keys of the answers in text (free text, chosen by minimum Bayes risk
        and never counted, keeps the vote open: all ``n`` are drawn)."""
        keys = self._call_keys(samples)
        if 2 * sum(1 for s in samples if s.tool_calls) >= len(samples):
            return keys
        texts = [dataclasses.replace(s, answer=None, tool_calls=()) if s.tool_calls else s for s in samples]
        try:
            return vote_keys(texts, is_free_text(self.extract), getattr(self.extract, "answer_keys", None))
        except StrategyInputError:
            return [None] * len(samples)

    def _call_keys(self, samples: Sequence[Sample]) -> list[str | None]:
        """Each reply's vote key (name and arguments of the calls it votes with; None: no valid call)."""
        return self._call_parts(samples)[4]

    def _call_parts(self, samples: Sequence[Sample]) -> tuple[list[Any], ...]:
        """Per reply: its calls, those that vote (``votes_on``), their names, their normalised
        arguments and the vote key joining both (None where a reply has no valid call)."""
        normalise = self.config.normalize_arguments
        calls = [json.loads(s.answer) if s.tool_calls and s.answer is not None else [] for s in samples]
        voting = [c if self.config.votes_on == "all_calls" else c[:1] for c in calls]
        names = [json.dumps([c["name"] for c in v]) if v else None for v in voting]
        args = [call_key(json.dumps(v), normalise) if v else None for v in voting]
        keys = [None if n is None else f"{n}|{a}" for n, a in zip(names, args, strict=True)]
        return calls, voting, names, args, keys

    def shares_draw_with(self, other: Strategy) -> bool:
        """Another ``tool_vote`` on the same backend, prompt, sampling, extraction and seed: its
        replies would be the same (the vote settings may differ: they only read the replies)."""
        if stop_of(self) is not None or stop_of(other) is not None:
            return False
        return (isinstance(other, ToolVote) and other.generator is self.generator and other.prompt == self.prompt
                and other.sampling == self.sampling and other.extract is self.extract and other.seed == self.seed)

    @classmethod
    def solve_together(cls, strategies: Sequence[Strategy], problems: Sequence[Any]) -> list[list[Solution]]:
        """ONE generator call of max(n) replies per problem; each config votes on its first n (as the
        sampling strategies share a draw), so a ladder n = 1, 4, 8 costs the n = 8 draw alone."""
        first = strategies[0]
        if not all(isinstance(s, ToolVote) and first.shares_draw_with(s) for s in strategies):
            return super().solve_together(strategies, problems)
        voters: list[ToolVote] = list(strategies)  # type: ignore[arg-type]
        n_max = max(s.config.n for s in voters)
        requests = [voters[0]._request(p, n_max) for p in problems]
        results = with_tool_calls(requests, first.generator.generate(requests))
        return [[s._vote(p, r, s.config.n) for p, r in zip(problems, results, strict=True)] for s in voters]

    def _vote(self, problem: Any, result: Any, n: int | None = None) -> Solution:
        """The vote over the first ``n`` replies of ``result`` (all when None), priced as if drawn alone;
        replies that only repeat an answered call are set aside by the rule every strategy that
        takes tools shares (:func:`tts.search.repeats.choose_past_repeats`), unless ``repeated_calls``
        is ``vote``."""
        n = n or len(result.completions)
        if n < len(result.completions):
            prefix = result.completions[:n]
            usage = prefix_usage(result.usage, [Sample(c.text, None, c.completion_tokens) for c in prefix],
                                 len(result.completions))
            result = dataclasses.replace(result, completions=prefix, usage=usage)
        samples, events = self._samples(result.completions)
        normalise = self.config.normalize_arguments
        answered = answered_calls(problem, normalise) if self.config.repeated_calls == "abstain" else set()
        return choose_past_repeats(samples, answered, lambda ss: self._choose(problem, ss, result, dict(events)),
                                   normalise)

    def _samples(self, completions: Sequence[Any]) -> tuple[list[Sample], dict[str, int]]:
        """The replies as samples (a reply's answer: its calls' canonical list, else its text's
        answer; a malformed call: no answer), and the count of replies without a usable call."""
        samples, events = [], {}
        for comp in completions:
            found, why = comp.tool_calls or (), comp.tool_call_error
            if not found:
                events[why or NO_CALL] = events.get(why or NO_CALL, 0) + 1
            answer = calls_answer(found) if found else None if why == MALFORMED else self.extract(comp.text)
            samples.append(Sample(comp.text, answer,
                                  comp.completion_tokens, comp.mean_logprob, comp.finish_reason,
                                  tuple(c.to_openai() for c in found)))
        return samples, events

    def _choose(self, problem: Any, samples: list[Sample], result: Any, events: dict[str, int]) -> Solution:
        """The vote over the replies' calls (a reply's ``answer``: the canonical list of its calls); a
        reply with ``tool_calls`` but no answer counts as calling and votes for nothing."""
        normalise = self.config.normalize_arguments
        calls, voting, names, args, keys = self._call_parts(samples)
        votes: dict[str, float] = {}
        for v, k in zip(voting, keys, strict=True):
            if k is not None:
                shown = call_key(json.dumps(v), normalise) or k
                votes[shown] = votes.get(shown, 0.0) + 1.0
        callers = sum(1 for s in samples if s.tool_calls)
        if not votes or 2 * callers < len(samples):  # its_hub: under half calling, the replies in text decide
            return self._without_calls(problem, samples, result, events)
        left = [i for i, c in enumerate(calls) if c]
        if self.config.match == "name_and_arguments":
            left = _most_common(left, keys)
        else:  # hierarchical: the names first, then the arguments among the calls left
            left = _most_common(left, names)
            if len(left) > 1:
                left = _most_common(left, args)
        if self.config.ties == "random" and len(left) > 1:
            chosen = random.Random(derive_seed(self.seed, problem.id, 1)).choice(left)
        else:
            chosen = left[0]
        # Every reply with the chosen key survived both votes, so counting over `left` counts them all.
        support = sum(1.0 for i in left if keys[i] == keys[chosen])
        trace = Trace(self.name, tuple(samples), votes=votes, selected=chosen, events=events)
        return Solution(problem.id, samples[chosen].answer, support / len(samples), result.usage, trace)

    def _without_calls(self, problem: Any, samples: list[Sample], result: Any, events: dict[str, int]) -> Solution:
        """Fewer than half of the replies hold a valid call: the answer the replies in text agree on
        (free text: by minimum Bayes risk; answers of another kind, such as the math prompt's: by a
        vote), or None."""
        samples = [s if not s.tool_calls else dataclasses.replace(s, answer=None) for s in samples]
        if not self.config.text_fallback:
            return Solution(problem.id, None, 0.0, result.usage, Trace(self.name, tuple(samples), events=events))
        # The calls abstain here (also those that left the vote as repeats), so the texts decide.
        answer, share, votes, idx = self.vote([dataclasses.replace(s, tool_calls=()) for s in samples])
        trace = Trace(self.name, tuple(samples), votes=votes, selected=idx,
                      events={**events, **({"answered_in_text": 1} if idx is not None else {})})
        return Solution(problem.id, answer, share, result.usage, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int, cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): one request of n replies."""
        return [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n)]
