"""The step-wise search space over a Generator: a state is a partial solution, a child is one more step.

A step ends at the step separator (default a blank line, ``"\\n\\n"``, as in Snell et al. 2024
and Beeching et al. 2024). :meth:`StepwiseSpace.expand` continues every state of every problem
to its next step boundary in ONE generator call (each request continues the state's text as a
partial assistant message, ``n`` = the children wanted, ``stop`` = the separator); then, in at
most one more call, it forces an answer onto the children that must stop without one.

A child is finished when its step states an answer (a ``\\boxed{}`` or "the answer is ..." that
the extractor can read). A child must stop without one when it reached the depth cap
(``max_depth`` steps), the token cap (the run's ``max_tokens`` per solution), or ended its message
(the backend reported an end of sequence rather than the separator); its text is then continued
with "Therefore, the final answer is $\\boxed{" and the answer read from what follows
(``force_answer=True``, the default). With ``force_answer=False`` such a child is instead stopped as
it is, as the reference implementations stop theirs (its_hub's particle filtering at its step cap,
search-and-learn's beam search at an end of sequence): no more requests, and its answer is what the
extractor reads off its whole text, None when it reads nothing. An empty step is no error: the
child is kept, never sent to the verifier, and ranks last.

Every request's seed is derived from the run seed, the problem, the search (its config label)
and the node's path in the tree, so no two expansions resend a seed.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tts.answers import extract_answer
from tts.backends.base import (
    Completion,
    GenerationRequest,
    GenerationResult,
    Generator,
    derive_seed,
    seed_of,
)
from tts.config import SamplingConfig
from tts.search.base import STEP_SEPARATOR, ExtractFn, PromptFn
from tts.types import Problem, Usage
from tts.verifiers.base import Verifier, VerifierScore

ANSWER_NUDGE = "Therefore, the final answer is $\\boxed{"
"""Appended to a solution that must stop without an answer; the model completes the box."""

_ANSWER_MARKER = re.compile(r"\\boxed\s*\{|\\fbox\s*\{|\b(?:final answer|the answer)\s*(?:is|:)", re.IGNORECASE)


class StepState(NamedTuple):
    """A node of the step-wise space: a partial (or finished) solution of one problem.

    Immutable like the frozen dataclasses of :mod:`tts.types`, but a named tuple: one is built per
    child of every search step (8k per step of a 64-problem, n = 16 search), and a named tuple
    builds five times faster than a frozen dataclass.

    Args:
        root: Position of the problem in the batch (the search root it belongs to).
        problem: The problem.
        steps: The non-empty steps so far (stripped, without separators).
        step: The text this node added (its step, and a forced answer if one was forced).
        depth: Generations from the root (an empty step counts).
        path: Child indices from the root, ``"3.0.1"`` (the root is ``""``); seeds derive from it.
        tokens: Generated tokens along the path (forced answers included).
        logprobs: Mean token logprob of each step in ``steps`` (None where absent).
        finished: Whether the solution is done: it stated its answer, had one forced, or (with
            ``force_answer=False``) was stopped as it was.
        answer: The extracted answer of a finished solution (None where a stopped one says none).
        forced: Why the answer was forced ("depth", "tokens", "ended"), None when stated freely or
            not forced (``force_answer=False``: the space's ``stopped_*`` events say why it stopped).
    """

    root: int
    problem: Problem
    steps: tuple[str, ...] = ()
    step: str = ""
    depth: int = 0
    path: str = ""
    tokens: int = 0
    logprobs: tuple[float | None, ...] = ()
    finished: bool = False
    answer: str | None = None
    forced: str | None = None

    @property
    def token_top_logprobs(self) -> None:
        """None: a search keeps no per-token distributions. With the fields ``problem``, ``steps``,
        ``finished`` and ``logprobs`` this makes a state a verifier item
        (:class:`~tts.verifiers.base.ItemView`), scored as it is, without a VerifyItem per child."""
        return None

    @property
    def empty(self) -> bool:
        """Whether this node's step is empty (never scored; ranks last)."""
        return self.depth > 0 and not self.step.strip()

    def text(self, separator: str) -> str:
        """The solution so far, steps joined by the separator."""
        return separator.join(self.steps)


_NO_USAGE = VerifierScore.__dataclass_fields__["usage"].default
"""The usage of a score built without one (tool verifiers): skipped without reading its fields."""

_INDEX_TEXT = tuple(map(str, range(4096)))
"""``str(j)`` for a child's index in its path, read rather than formatted (once per generated step)."""


def _close_braces(text: str) -> str:
    """Close the braces a forced answer left open (``\\boxed{\\frac{1}{2}`` -> ``...}}``)."""
    return text + "}" * max(text.count("{") - text.count("}"), 0)


def slots_builder(cls: type, template: Any, varying: Sequence[str]) -> Callable[..., Any]:
    """A function ``build(*values)``: an instance of the frozen, slotted dataclass ``cls`` with the
    ``varying`` fields set to ``values`` (in that order) and the others as in ``template``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` and then runs
    its ``__post_init__`` checks. A search builds one request per expanded node and one sample per
    candidate, thousands per step, so the space sets the slots directly, through each slot's
    setter (with the constructors instead, a beam search of 64 problems took 11% more
    instructions: 281M against 254M). ``template`` is built by the real constructor, so the fields
    that do not vary were validated by its ``__post_init__``; the caller validates the varying
    ones (or calls the constructor where they could be invalid).
    """
    names = [f.name for f in dataclasses.fields(cls)]
    missing = sorted(set(varying) - set(names))
    if missing:
        raise ValueError(f"{cls.__name__} has no fields {missing}")
    fixed = [(getattr(cls, name).__set__, getattr(template, name)) for name in names if name not in varying]
    setters = [getattr(cls, name).__set__ for name in varying]
    new, count = object.__new__, len(setters)

    def build(*values: Any) -> Any:
        if len(values) != count:
            raise TypeError(f"build() takes {count} values ({', '.join(varying)}), got {len(values)}")
        obj = new(cls)
        for set_slot, value in fixed:
            set_slot(obj, value)
        for set_slot, value in zip(setters, values):
            set_slot(obj, value)
        return obj

    return build


class StepwiseSpace:
    """Partial solutions of a batch of problems, grown one step per expansion.

    Args:
        generator: The backend (any :class:`~tts.backends.base.Generator`).
        prompt: Problem -> chat messages.
        problems: The problems; one search root each.
        sampling: Temperature, top-p, and ``max_tokens``: the token cap of one whole solution.
        separator: The step separator (a stop string of every step request); the default is
            :data:`~tts.search.base.STEP_SEPARATOR`, at which :func:`~tts.search.base.split_steps`
            cuts the whole solutions of the other strategies, so a verifier sees the same steps.
        max_depth: Steps after which an unfinished solution has its answer forced.
        step_tokens: Most tokens of one step.
        extract: Text -> answer.
        seed: The run seed.
        seed_key: Distinguishes the searches of one run (the strategy's config label), so that
            two configs never resend each other's seeds.
        answer_tokens: Most tokens of a forced answer (added beyond the token cap).
        heal_separator: Continue a partial solution from all but the last character of the
            separator, so that the model writes that character itself (see
            :meth:`continuation`); False ends the continuation with the whole separator.
        force_answer: Force an answer onto a child that must stop without one (one more
            request per such child, all in one extra generator call per expansion); False stops
            it as it is, its answer read off its whole text (maybe None), as its_hub and
            search-and-learn do.

    Attributes:
        usage: Generator usage per problem (every request, discarded children included).
        events: Per problem: ``empty_steps`` and forced answers (``forced_depth``,
            ``forced_tokens``, ``forced_ended``), or with ``force_answer=False`` the children
            stopped as they were (``stopped_depth``, ``stopped_tokens``, ``stopped_ended``).
        generate_calls: Generator calls so far.
    """

    def __init__(
        self,
        generator: Generator,
        prompt: PromptFn,
        problems: Sequence[Problem],
        sampling: SamplingConfig,
        separator: str = STEP_SEPARATOR,
        max_depth: int = 8,
        step_tokens: int = 128,
        extract: ExtractFn = extract_answer,
        seed: int = 0,
        seed_key: str = "",
        answer_tokens: int = 32,
        heal_separator: bool = True,
        force_answer: bool = True,
    ) -> None:
        if not separator:
            raise ValueError("the step separator must be a non-empty string")
        # A one-character separator cannot be split: the model would stop as soon as it wrote it.
        self._held_back = 1 if heal_separator and len(separator) > 1 else 0
        self.generator = generator
        self.problems = list(problems)
        self.messages = [prompt(p) for p in self.problems]
        self.sampling = sampling
        self.separator = separator
        self.max_depth = max_depth
        self.step_tokens = step_tokens
        self.extract = extract
        self.seed = seed
        self.seed_key = seed_key
        self.answer_tokens = answer_tokens
        self.force_answer = force_answer
        self._stop = (separator,)
        # The step requests differ only in these fields; the rest are set from one template.
        self._build_request = slots_builder(
            GenerationRequest,
            GenerationRequest(messages=(), temperature=sampling.temperature, top_p=sampling.top_p,
                              stop=self._stop, logprobs=True),
            ("messages", "n", "temperature", "max_tokens", "seed", "continuation", "key"))
        # extract() of every step that states an answer, by its text: siblings often end alike
        # ("The answer is \\boxed{12}."), and extraction (math-verify) costs microseconds each.
        self._answers: dict[str, str | None] = {}
        self._usage_parts: list[list[Usage]] = [[] for _ in self.problems]
        self._usage: list[Usage] | None = None
        self.events: list[Counter[str]] = [Counter() for _ in self.problems]
        self.generate_calls = 0

    # --- the SearchSpace protocol ---------------------------------------------------------------

    def initial_states(self) -> list[StepState]:
        """An empty solution per problem."""
        return [StepState(i, p) for i, p in enumerate(self.problems)]

    def is_terminal(self, state: StepState) -> bool:
        """Finished solutions (answer stated or forced)."""
        return state.finished

    def expand(self, states: Sequence[StepState], counts: Sequence[int]) -> list[list[StepState]]:
        """``counts[i]`` next steps of each state: one generator call, plus one to force answers
        (none with ``force_answer=False``)."""
        return self._expand(states, counts)

    def rollout_step(self, states: Sequence[StepState]) -> list[StepState | None]:
        """The greedy (temperature 0) next step of each state, in one generator call (plus one to
        force answers): the rollouts of lookahead search. None where the backend returned nothing.

        Forced answers and empty steps of rollouts are counted as ``lookahead_forced_*`` and
        ``lookahead_empty_steps`` events, apart from the search's own.
        """
        before = [Counter(e) for e in self.events]
        children = self._expand(states, [1] * len(states), temperature=0.0)
        for i, (old, now) in enumerate(zip(before, self.events, strict=True)):
            if now != old:
                self.events[i] = old + Counter({f"lookahead_{k}": v for k, v in (now - old).items()})
        return [kids[0] if kids else None for kids in children]

    def _expand(self, states: Sequence[StepState], counts: Sequence[int],
                temperature: float | None = None) -> list[list[StepState]]:
        if not states:
            return []
        # 1. Every state of every problem continued to its next step boundary, in one call.
        requests = self._step_requests(states, counts, temperature)
        results = self._generate(requests)
        parts, self._usage = self._usage_parts, None
        pending: list[tuple[int, int]] = []  # (state, child) of the children that must stop without an answer
        children = self._children(states, results, pending)
        # 2. One more call forcing an answer onto every child that must stop without one.
        if pending:
            forced = self._generate([self._answer_request(children[i][j]) for i, j in pending])
            for (i, j), result in zip(pending, forced, strict=True):
                kid = children[i][j]
                parts[kid.root].append(result.usage)
                self.events[kid.root][f"forced_{kid.forced}"] += 1
                children[i][j] = self._with_forced_answer(kid, result.completions[0] if result.completions else None)
        return children

    @property
    def usage(self) -> list[Usage]:
        """Generator usage per problem (every request, discarded children included)."""
        # Summed when read (and kept until the next expansion): adding each request's Usage as it
        # comes rebuilds a frozen Usage, and its growing tuple of shapes, once per request.
        if self._usage is None:
            self._usage = [Usage.total(parts) for parts in self._usage_parts]
        return self._usage

    # --- requests -------------------------------------------------------------------------------

    def _generate(self, requests: list[GenerationRequest]) -> list:
        self.generate_calls += 1
        results = self.generator.generate(requests)
        if len(results) != len(requests):
            raise RuntimeError(f"the generator returned {len(results)} results for {len(requests)} requests")
        return results

    def _seed(self, state: StepState, suffix: str = "") -> int:
        return derive_seed(self.seed, f"{state.problem.id}|{self.seed_key}|{state.path}{suffix}", state.depth)

    def continuation(self, state: StepState, whole: bool = False) -> str:
        """The partial assistant message a step request continues: the steps so far and the
        separator, less its last character unless ``whole`` (or healing is off).

        A prompt that ends on the whole separator is tokenised differently from a separator the
        model writes (a blank line in the prompt is one token; a model that writes one emits its
        newlines with the next step's first word), and the next step follows that boundary, not the
        model's own distribution. Measured on SmolLM2-135M (chains, "1. 8 * 2 = 16" written, 16
        samples): "The answer is 16." came next 0 times after a prompt ending in both newlines, 11
        times after one ending in one newline. The step the model then writes starts with the
        held-back character, which is stripped with the rest of the step's edge whitespace.
        """
        if not state.steps:
            return ""
        cut = 0 if whole else self._held_back
        return state.text(self.separator) + self.separator[: len(self.separator) - cut]

    def _step_requests(self, states: Sequence[StepState], counts: Sequence[int],
                       temperature: float | None = None) -> list[GenerationRequest]:
        """The step request of each state, ``counts[i]`` samples each.

        One request per expanded node of every step: what :meth:`_seed` and :meth:`continuation`
        compute is inlined here, with what the requests share read once (about 4 us a request
        instead of 6).
        """
        sampling, build, messages, separator = self.sampling, self._build_request, self.messages, self.separator
        temperature = sampling.temperature if temperature is None else temperature
        cap, step_tokens = sampling.max_tokens, self.step_tokens
        healed = separator[: len(separator) - self._held_back]  # continuation(): the separator, healed
        # _seed(state) is derive_seed(run seed, "problem|seed key|path", depth): its text up to the
        # path is the same for every state of a problem, so it is joined once per problem here.
        seed_prefix = [f"{self.seed}|{p.id}|{self.seed_key}|" for p in self.problems]
        out = []
        for state, k in zip(states, counts, strict=True):
            if k < 1:
                raise ValueError(f"GenerationRequest.n must be >= 1, got {k}")
            root, steps = state.root, state.steps
            # GenerationRequest(messages, n, temperature, max_tokens, seed, continuation, key; top_p,
            # stop and logprobs=True from the template), built without its frozen constructor.
            out.append(build(
                messages[root],
                k,
                temperature,
                max(1, min(step_tokens, cap - state.tokens)),
                seed_of(f"{seed_prefix[root]}{state.path}|{state.depth}"),  # _seed(state)
                separator.join(steps) + healed if steps else "",  # continuation(state)
                state.problem.id,
            ))
        return out

    def _answer_request(self, state: StepState) -> GenerationRequest:
        # Greedy: the answer a solution leads to is read off it, not sampled.
        return GenerationRequest(
            messages=self.messages[state.root],
            n=1,
            temperature=0.0,
            max_tokens=self.answer_tokens,
            stop=self._stop,
            seed=self._seed(state, "|answer"),
            logprobs=True,
            continuation=self.continuation(state, whole=True) + ANSWER_NUDGE,
            key=state.problem.id,
        )

    # --- children -------------------------------------------------------------------------------

    def _children(self, parents: Sequence[StepState], results: Sequence[GenerationResult],
                  pending: list[tuple[int, int]]) -> list[list[StepState]]:
        """The children the completions of each request make, one list per parent, in order; each
        request's usage is added to its problem's.

        A child is finished when its step states an answer. When it must stop without one,
        ``forced`` is set (the child not yet finished) and ``(its parent's index, its position)`` is
        added to ``pending``; with ``force_answer=False`` it is finished instead, as it is, with the
        answer read off its whole text and a ``stopped_*`` event. This is the hot loop of a search
        step (it runs once per generated step), so it runs over the whole step in one call, with
        what every child shares read once and what siblings share read off their parent once.
        """
        parts, events, answers, extract = self._usage_parts, self.events, self._answers, self._answer
        cap, max_depth, force, separator = self.sampling.max_tokens, self.max_depth, self.force_answer, self.separator
        marker, new = _ANSWER_MARKER.search, tuple.__new__
        out: list[list[StepState]] = []
        for index, (parent, result) in enumerate(zip(parents, results, strict=True)):
            root, problem, steps, logprobs = parent.root, parent.problem, parent.steps, parent.logprobs
            depth, tokens, prefix = parent.depth + 1, parent.tokens, f"{parent.path}." if parent.path else ""
            index_text = _INDEX_TEXT if len(result.completions) <= len(_INDEX_TEXT) else tuple(
                map(str, range(len(result.completions))))
            at_depth_cap = depth >= max_depth
            parts[root].append(result.usage)
            kids: list[StepState] = []
            empty = 0
            for j, c in enumerate(result.completions):
                step = c.text.strip()
                total = tokens + c.completion_tokens
                if step:
                    # Most steps state no answer, and the case-insensitive marker regex has no fast
                    # literal scan: it runs only on steps with a backslash or "answer", without which
                    # it cannot match.
                    stated = ("\\" in step or "answer" in step.casefold()) and marker(step) is not None
                    answer = (answers[step] if step in answers else extract(step)) if stated else None
                    after, scores = steps + (step,), logprobs + (c.mean_logprob,)
                else:
                    answer, after, scores = None, steps, logprobs
                    empty += 1
                forced = None
                if answer is None:
                    # The model ended its message (end of sequence) rather than stopping at the separator.
                    # A backend that cannot tell (None) never counts as ended: such a path goes on and is
                    # forced at the depth or token cap.
                    if c.ended_by_eos is True:
                        forced = "ended"
                    elif at_depth_cap:
                        forced = "depth"
                    elif total >= cap:
                        forced = "tokens"
                    if forced is not None:
                        if force:
                            pending.append((index, j))
                        else:
                            # Stopped as it is (its_hub, search-and-learn): the answer is what its
                            # whole text says, if anything; finished, so the search ends this path.
                            events[root][f"stopped_{forced}"] += 1
                            answer = extract(separator.join(after)) if after else None
                            kids.append(new(StepState, (root, problem, after, step, depth, prefix + index_text[j],
                                                        total, scores, True, answer, None)))
                            continue
                # StepState(root, problem, steps, step, depth, path, tokens, logprobs, finished, answer,
                # forced), built as its tuple: half the cost of calling the class (test_stepwise checks
                # that this lists every field).
                kids.append(new(StepState, (root, problem, after, step, depth, prefix + index_text[j], total, scores,
                                            answer is not None, answer, forced)))
            if empty:
                events[root]["empty_steps"] += empty
            out.append(kids)
        return out

    def _with_forced_answer(self, state: StepState, c: Completion | None) -> StepState:
        said = _close_braces(ANSWER_NUDGE + (c.text if c is not None else ""))
        step = f"{state.step}{self.separator}{said}" if state.step else said
        return state._replace(
            steps=state.steps + (said,),
            step=step,
            tokens=state.tokens + (c.completion_tokens if c is not None else 0),
            logprobs=state.logprobs + ((c.mean_logprob if c is not None else None),),
            finished=True,
            answer=self._answer(said),
        )

    def _answer(self, text: str) -> str | None:
        """``extract(text)``, read once per distinct text of this search."""
        answers = self._answers
        if text not in answers:
            answers[text] = self.extract(text)
        return answers[text]


class StepScorer:
    """The search's verifier of :class:`StepState`: one batched ``Verifier.score`` call per step.

    Empty steps are not sent (they rank last, :data:`~tts.search.tree.tree_search.PENALTY`). The
    scoring usage is kept per problem.

    Args:
        verifier: Any :class:`~tts.verifiers.base.Verifier`.
        problems: Number of problems (search roots).

    Attributes:
        usage: Verifier usage per problem.
        calls: ``score`` calls made to the verifier.
    """

    def __init__(self, verifier: Verifier, problems: int) -> None:
        self.verifier = verifier
        self._usage_parts: list[list[Usage]] = [[] for _ in range(problems)]
        self._usage: list[Usage] | None = None
        self.calls = 0

    @property
    def usage(self) -> list[Usage]:
        """Verifier usage per problem."""
        if self._usage is None:  # summed when read, as StepwiseSpace.usage
            self._usage = [Usage.total(parts) for parts in self._usage_parts]
        return self._usage

    def score(self, states: Sequence[StepState]) -> list[VerifierScore | None]:
        """Scores of the non-empty states (None for empty steps), in order."""
        # The states themselves are the verifier's items (StepState is an ItemView: no VerifyItem per
        # child); empty steps are left out (StepState.empty, inlined: this runs once per generated step).
        items = [s for s in states if not s.depth or s.step.strip()]
        if not items:
            return [None] * len(states)
        self.calls += 1
        scores = self.verifier.score(items)
        if len(scores) != len(items):
            raise ValueError(f"verifier {getattr(self.verifier, 'name', '?')} returned {len(scores)} scores "
                             f"for {len(items)} items")
        usages = [getattr(score, "usage", None) for score in scores]
        if usages.count(_NO_USAGE) == len(usages):  # a tool verifier: no score spent anything (an identity test each)
            return self._in_order(states, items, scores)
        parts, self._usage = self._usage_parts, None
        for state, usage in zip(items, usages, strict=True):
            if usage is _NO_USAGE:  # a tool verifier's score: VerifierScore's default usage, nothing spent
                continue
            if isinstance(usage, Usage) and (usage.calls or usage.prompt_tokens or usage.completion_tokens
                                             or usage.wall_seconds):
                parts[state.root].append(usage)  # a tool verifier's zero usage is skipped
        return self._in_order(states, items, scores)

    @staticmethod
    def _in_order(states: Sequence[StepState], items: Sequence[StepState],
                  scores: Sequence[VerifierScore]) -> list[VerifierScore | None]:
        """The scores of ``items`` (the non-empty ``states``) placed among ``states``, None for the rest."""
        if len(items) == len(states):
            return list(scores)
        it = iter(scores)
        return [None if s.depth and not s.step.strip() else next(it) for s in states]
