"""Parity: step-score aggregation, whole solutions cut into steps for step verifiers, best-of-N and
weighted best-of-N with a PRM, and the exact text a PRM reads, pinned to search-and-learn.

Reference code: huggingface/search-and-learn, commit 6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f:
``src/sal/config.py`` (``agg_strategy = "last"``), ``src/sal/utils/score.py`` (``aggregate_scores``;
``score`` aggregates with "last"), ``src/sal/search/best_of_n.py`` (argmax of the aggregated PRM
scores), ``src/sal/utils/math.py`` (``find_answer_with_largest_sum``: weighted best-of-N) and
``src/sal/models/reward_models.py`` (``MathShepherd.score`` and ``Qwen_2_5_Math.score``: the PRM
input). Each rule is transcribed below as a small function in our own code and run on hand-made
inputs beside tts.

Documented departures (each pinned below): tts cuts a solution into stripped, non-empty steps
(:func:`tts.search.base.split_steps`, the step-wise search space's steps), where the reference
replaces every blank line by the tag, so whitespace around a step and empty steps (three or more
newlines) render differently; best-of-N breaks equal verifier scores by mean logprob before the
earliest sample (the reference takes the earliest), and only picks an unanswered sample when none
has an answer.
"""

from __future__ import annotations

import hashlib
import inspect
import math

import pytest

from tts.backends.base import Completion, GenerationResult
from tts.backends.scripted import ScriptedGenerator
from tts.config import VerifierConfigBase
from tts.prompts import MATH_PROMPT
from tts.search.base import STEP_SEPARATOR, scores_steps, solution_item, split_steps
from tts.search.sampling.best_of_n import BestOfN, BestOfNConfig
from tts.search.sampling.weighted_vote import WeightedVote, WeightedVoteConfig
from tts.search.tree.stepwise import StepwiseSpace
from tts.types import Problem, Usage
from tts.verifiers.base import aggregate
from tts.verifiers.function import FunctionVerifier
from tts.verifiers.prm import PRMVerifier, PRMVerifierConfig
from tts.verifiers.prm_adapters import ADAPTERS

PINNED = {"verifier:prm", "strategy:best_of_n", "strategy:weighted_vote"}

SAL = "huggingface/search-and-learn@6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f"

# sha256 of search-and-learn's default ``Config.system_prompt`` (src/sal/config.py at SAL), which its
# MathShepherd PRM reads first; pinned by hash so the prose is not repeated here.
SAL_SYSTEM_PROMPT_SHA256 = "fba6765edf2162ae50990853a7f310103b685c72d9b4434cccec28371f005dae"

PROBLEM = Problem("p", "Tom has 3 apples and buys 4 more. How many apples does he have?", "7")


# --- the reference rules, transcribed ------------------------------------------------------------


def sal_aggregate(scores: list[float], how: str) -> float:
    """aggregate_scores (src/sal/utils/score.py): the last step's score, the lowest, or the product."""
    return {"last": lambda: scores[-1], "min": lambda: min(scores), "prod": lambda: math.prod(scores)}[how]()


def sal_best_of_n(step_scores: list[list[float]], how: str) -> int:
    """best_of_n (src/sal/search/best_of_n.py): np.argmax over the aggregated scores (first on ties)."""
    totals = [sal_aggregate(s, how) for s in step_scores]
    return totals.index(max(totals))


def sal_weighted_answer(answers: list[str], step_scores: list[list[float]], how: str) -> tuple[str, dict[str, float]]:
    """find_answer_with_largest_sum (src/sal/utils/math.py): each answer's aggregated scores summed;
    the largest sum wins, the answer seen first on ties (max over an insertion-ordered dict)."""
    sums: dict[str, float] = {}
    for answer, scores in zip(answers, step_scores, strict=True):
        sums[answer] = sums.get(answer, 0.0) + sal_aggregate(scores, how)
    best = max(sums.values())
    return next(a for a, s in sums.items() if s == best), sums


def sal_qwen_prm_text(question: str, completion: str) -> str:
    """Qwen_2_5_Math.score (src/sal/models/reward_models.py): the completion with each blank line
    turned into <extra_0> and one more <extra_0> at its end, as the assistant turn after a fixed
    system prompt and the question, rendered by the tokenizer's chat template without a generation
    prompt. Qwen2.5's template writes each message as ``<|im_start|>ROLE\\nCONTENT<|im_end|>\\n``
    (and adds a default system message only when none is given)."""
    system = "Please reason step by step, and put your final answer within \\boxed{}."
    assistant = "<extra_0>".join(completion.split("\n\n")) + "<extra_0>"
    turns = [("system", system), ("user", question), ("assistant", assistant)]
    return "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)


def sal_math_shepherd_text(system: str, question: str, completion: str) -> str:
    """MathShepherd.score (src/sal/models/reward_models.py): " ки" before every blank line, and one
    at the end unless the completion ends with a blank line; the prompt is the policy's system
    prompt, a newline, the question, a newline, then a space before the completion."""
    tagged = " ки\n\n".join(completion.split("\n\n"))
    if not completion.endswith("\n\n"):
        tagged += " ки"
    return f"{system}\n{question}\n {tagged}"


# --- a PRM stand-in: per-step scores from a table, aggregated as PRMVerifier.score does ----------


def table_prm(table: dict[str, float], aggregation: str, seen: list | None = None) -> FunctionVerifier:
    """Scores each step from a table (``seen`` keeps the steps of every item); aggregates with the
    config's rule as PRMVerifier does and declares itself a step verifier exactly when PRMVerifier does."""

    def reward(problem, steps):
        if seen is not None:
            seen.append(steps)
        return [table.get(s, 0.5) for s in steps]

    return FunctionVerifier(reward, per_step=PRMVerifier.step_verifier, aggregation=aggregation, name="prm")


# Three answered solutions of three steps each; per-step PRM scores chosen so that "last", "min" and
# "prod" each pick a different one.
SOLUTIONS = [
    ("Tom starts with 3 apples.\n\nHe buys 4 more, 3 + 4 = 8.\n\nThe answer is \\boxed{8}.", [0.9, 0.2, 0.96]),
    ("Tom has 3 apples.\n\nAdding 4 gives 3 + 4 = 7.\n\nSo \\boxed{7}.", [0.95, 0.95, 0.62]),
    ("3 apples at first.\n\n4 more make 7.\n\nHe has \\boxed{7}.", [0.7, 0.7, 0.7]),
]
TABLE = {step: score for text, scores in SOLUTIONS for step, score in zip(split_steps(text), scores, strict=True)}


def _result(texts: list[str], logprobs: list[float] | None = None) -> GenerationResult:
    logprobs = logprobs or [-0.5] * len(texts)
    return GenerationResult(tuple(Completion(t, 20, lp) for t, lp in zip(texts, logprobs, strict=True)), Usage())


def _run(strategy_cls, config_cls, how: str, texts: list[str], logprobs: list[float] | None = None):
    strategy = strategy_cls(config_cls(n=len(texts), verifier={"kind": "prm", "aggregation": how}),
                            ScriptedGenerator({}), MATH_PROMPT.render)
    seen: list[tuple[str, ...]] = []
    strategy._verifier = table_prm(TABLE, strategy.config.verifier.aggregation, seen)
    result = _result(texts, logprobs)
    (scored,) = strategy.score_samples([PROBLEM], [result])
    return strategy.aggregate_result(PROBLEM.id, result, scored=scored), seen


# --- finding 4: the default aggregation --------------------------------------------------------


def test_the_default_step_aggregation_is_last_as_in_search_and_learn():
    """search-and-learn's Config.agg_strategy defaults to "last" (src/sal/config.py at SAL), and its
    final scoring aggregates with "last" (src/sal/utils/score.py); the ETS repository's REBASE
    scores a node by the last of its step scores (SqueezeAILab/ETS, rebase.py, Tree.insert,
    commit ac937a72319fae68b2f4e9c439d3a07c85377f1f). tts's default follows them for every
    verifier; "min" (tts's default before) stays a setting."""
    assert VerifierConfigBase.model_fields["aggregation"].default == "last"
    assert PRMVerifierConfig().aggregation == "last"
    assert PRMVerifierConfig(aggregation="min").aggregation == "min"


@pytest.mark.parametrize("how", ["last", "min", "prod"])
def test_each_aggregation_setting_is_the_references(how):
    """aggregate_scores (src/sal/utils/score.py at SAL): last / min / prod of the step scores."""
    for scores in ([0.9, 0.2, 0.95], [0.6, 0.7, 0.8], [0.5], [1.0, 0.0, 0.3]):
        assert aggregate(scores, how) == pytest.approx(sal_aggregate(scores, how))


# --- finding 5: whole solutions reach a step verifier cut into steps ----------------------------


def test_the_step_splitter_makes_the_step_wise_spaces_steps():
    """The step-wise space stops each step at "\\n\\n" (Snell et al. 2024; search-and-learn's
    beam search stops at it too) and keeps it stripped and non-empty; split_steps cuts a whole
    solution the same way, so a step verifier sees the same steps from either kind of strategy."""
    assert STEP_SEPARATOR == "\n\n"
    assert inspect.signature(StepwiseSpace).parameters["separator"].default == STEP_SEPARATOR
    text = SOLUTIONS[0][0]
    assert split_steps(text) == tuple(text.split("\n\n"))
    # Departure: whitespace around a step and empty steps are dropped (the reference would tag them).
    assert split_steps(" a \n\n\n\nb\n\n") == ("a", "b")


def test_a_prm_scores_every_step_of_a_whole_solution_and_best_of_n_picks_like_search_and_learn():
    """best_of_n (src/sal/search/best_of_n.py at SAL): the PRM scores every step of each completion
    (its scorers cut at "\\n\\n"), the scores are aggregated with agg_strategy, and the argmax is
    kept. tts used to send the whole completion as ONE step, so the PRM saw one tag and the
    aggregation did nothing."""
    texts = [t for t, _ in SOLUTIONS]
    step_scores = [s for _, s in SOLUTIONS]
    picks = {}
    for how in ("last", "min", "prod"):
        sol, seen = _run(BestOfN, BestOfNConfig, how, texts)
        assert seen == [tuple(t.split("\n\n")) for t in texts]  # three steps each, not one
        assert list(sol.trace.scores) == pytest.approx([sal_aggregate(s, how) for s in step_scores])
        assert sol.trace.selected == sal_best_of_n(step_scores, how)
        picks[how] = sol.trace.selected
    assert len(set(picks.values())) == 3  # the aggregation decides


def test_best_of_n_ties_depart_by_logprob_before_order():
    """Documented departure: equal verifier scores are told apart by mean logprob (then the
    earliest); search-and-learn's np.argmax takes the earliest. With distinct logprobs in order the
    two agree."""
    texts = [SOLUTIONS[1][0], SOLUTIONS[1][0].replace("So", "Thus")]
    TABLE["Thus \\boxed{7}."] = TABLE["So \\boxed{7}."]
    try:
        sol, _ = _run(BestOfN, BestOfNConfig, "last", texts, logprobs=[-0.9, -0.1])
        assert sol.trace.selected == 1 and sal_best_of_n([SOLUTIONS[1][1]] * 2, "last") == 0
        sol, _ = _run(BestOfN, BestOfNConfig, "last", texts, logprobs=[-0.1, -0.9])
        assert sol.trace.selected == 0
    finally:
        del TABLE["Thus \\boxed{7}."]


def test_weighted_vote_sums_each_answers_aggregated_step_scores_like_search_and_learn():
    """find_answer_with_largest_sum (src/sal/utils/math.py at SAL): each completion votes for its
    answer with its aggregated PRM score; the answer with the largest sum wins (the first seen on
    ties). Here "8" wins under "last" (0.96 + 0.96 against 0.62 + 0.7) and "7" under "min" and "prod"."""
    texts = [SOLUTIONS[0][0], SOLUTIONS[1][0], SOLUTIONS[2][0], SOLUTIONS[0][0]]
    answers = ["8", "7", "7", "8"]
    step_scores = [SOLUTIONS[0][1], SOLUTIONS[1][1], SOLUTIONS[2][1], SOLUTIONS[0][1]]
    winners = set()
    for how in ("last", "min", "prod"):
        sol, seen = _run(WeightedVote, WeightedVoteConfig, how, texts)
        assert all(len(steps) == 3 for steps in seen)
        want, sums = sal_weighted_answer(answers, step_scores, how)
        assert sol.answer == want
        assert sol.trace.votes == pytest.approx(sums)
        winners.add(sol.answer)
    assert winners == {"7", "8"}


def test_whole_answer_verifiers_still_get_the_whole_text_as_one_step():
    """Verifiers that read a whole answer (the logprob and self-certainty scorers, a judge of whole
    solutions) get the text as one step with its mean logprob, as before; step verifiers (a PRM,
    the arithmetic tool, a per-step judge) get its steps."""
    from tts.registry import VERIFIERS
    from tts.verifiers.judge import JudgeConfig, LLMJudge

    text = SOLUTIONS[0][0]
    whole = {"logprob", "self_certainty", "rm"}
    for name in VERIFIERS.names():
        cls = VERIFIERS.load(name)
        if name == "judge":
            continue
        assert scores_steps(cls) == (name not in whole), name
    gen = ScriptedGenerator({})
    assert not scores_steps(LLMJudge(JudgeConfig(), gen))
    assert scores_steps(LLMJudge(JudgeConfig(per_step=True), gen))
    item = solution_item(PROBLEM, text, object(), mean_logprob=-0.3)
    assert item.steps == (text,) and item.logprobs == (-0.3,) and item.finished
    item = solution_item(PROBLEM, text, table_prm({}, "last"), mean_logprob=-0.3)
    assert item.steps == split_steps(text) and item.logprobs == () and item.finished


# --- the text a PRM reads -------------------------------------------------------------------------

THREE_STEPS = "Tom starts with 3 apples.\n\nHe buys 4 more: 3 + 4 = 7.\n\nSo he has \\boxed{7} apples."


def test_qwen25_math_prm_reads_the_references_bytes():
    """Qwen_2_5_Math.score (src/sal/models/reward_models.py at SAL): <extra_0> after each step, in
    Qwen's chat format with the system prompt "Please reason step by step, ..." (see
    sal_qwen_prm_text). tts's qwen2.5-math-prm adapter renders the same bytes for a three-step
    solution cut by split_steps, and tags exactly the three steps."""
    adapter = ADAPTERS["qwen2.5-math-prm"]
    text, spans, _ = adapter.render(PROBLEM.question, split_steps(THREE_STEPS), tokenizer=None)
    assert text == sal_qwen_prm_text(PROBLEM.question, THREE_STEPS)
    assert [text[a:b] for a, b in spans] == ["<extra_0>"] * 3
    assert adapter.head == "token_classify" and adapter.positive_class == 1  # make_step_rewards reads [:, 1]


def test_math_shepherd_reads_the_references_bytes():
    """MathShepherd.score (src/sal/models/reward_models.py at SAL): "{system}\\n{question}\\n "
    then the completion with " ки" after every step and the blank lines kept; the score is the
    softmax over the "+" / "-" logits at each tag, P("+") (CANDIDATE_TOKENS = [648, 387], column 0).
    tts's math-shepherd adapter renders the same bytes, with search-and-learn's default system
    prompt (checked by hash), and reads "+" as the good label."""
    adapter = ADAPTERS["math-shepherd"]
    assert hashlib.sha256(adapter.system.encode()).hexdigest() == SAL_SYSTEM_PROMPT_SHA256
    text, spans, special = adapter.render(PROBLEM.question, split_steps(THREE_STEPS), tokenizer=None)
    assert text == sal_math_shepherd_text(adapter.system, PROBLEM.question, THREE_STEPS)
    assert [text[a:b] for a, b in spans] == ["ки"] * 3
    assert special  # tokenised with the tokenizer's BOS, as the reference's tokenizer(...) call does
    assert (adapter.head, adapter.good_label, adapter.bad_label) == ("lm_labels", "+", "-")


def test_the_model_cards_math_shepherd_layout_stays_a_setting():
    """The layout of the Math-Shepherd model card ("{question} Step 1: ... ки\\nStep 2: ... ки"),
    tts's math-shepherd adapter before it followed search-and-learn, is kept as
    ``adapter: math-shepherd-card``."""
    adapter = ADAPTERS["math-shepherd-card"]
    text, _, _ = adapter.render("Q?", ("a", "b", "c"), tokenizer=None)
    assert text == "Q? Step 1: a ки\nStep 2: b ки\nStep 3: c ки"
    assert PRMVerifierConfig(adapter="math-shepherd-card").adapter == adapter


def _cached_tokenizer(model: str):
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception as exc:  # noqa: BLE001  not in the local cache: nothing is downloaded in tests
        pytest.skip(f"{model}'s tokenizer is not in the local Hugging Face cache ({type(exc).__name__}); "
                    "tests never download. The tag positions are checked on tiny tokenizers in "
                    "tests/verifiers/test_prm.py")


def test_qwen25_math_prm_tag_is_one_token_of_the_real_tokenizer_and_its_template_gives_the_same_bytes():
    """With the real Qwen2.5-Math-PRM tokenizer at hand: <extra_0> is one token (the model card's
    step separator id) and the reference's apply_chat_template gives tts's bytes."""
    tokenizer = _cached_tokenizer("Qwen/Qwen2.5-Math-PRM-7B")
    assert len(tokenizer.encode("<extra_0>", add_special_tokens=False)) == 1
    messages = [{"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
                {"role": "user", "content": PROBLEM.question},
                {"role": "assistant", "content": "<extra_0>".join(THREE_STEPS.split("\n\n")) + "<extra_0>"}]
    reference = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    text, _, _ = ADAPTERS["qwen2.5-math-prm"].render(PROBLEM.question, split_steps(THREE_STEPS), tokenizer)
    assert text == reference


def test_math_shepherd_tag_and_labels_are_the_references_token_ids_in_the_real_tokenizer():
    """With the real Math-Shepherd tokenizer at hand: "ки" is STEP_TAG_ID 12902 in the rendered
    text, and "+" / "-" are CANDIDATE_TOKENS 648 / 387 (src/sal/models/reward_models.py at SAL)."""
    tokenizer = _cached_tokenizer("peiyi9979/math-shepherd-mistral-7b-prm")
    from tts.verifiers.prm import encode_item
    from tts.verifiers.prm_adapters import resolve_adapter

    resolved = resolve_adapter(ADAPTERS["math-shepherd"], tokenizer)
    assert (resolved.good_id, resolved.bad_id) == (648, 387)
    ids, rows = encode_item(resolved, tokenizer, PROBLEM.question, split_steps(THREE_STEPS))
    assert resolved.tag_id == 12902 and ids.count(12902) == 3 and rows == [0, 1, 2]


def test_weighted_vote_departures_when_no_weight_informs_and_for_unanswered_samples():
    """Documented departures of weighted_vote (its module docstring): when the verifier scores every
    answered sample 0, tts counts the answers plainly (event ``unweighted_vote``) where
    find_answer_with_largest_sum (src/sal/utils/math.py at SAL) keeps the first answer seen (all
    sums 0); and a sample without an answer abstains in tts, where the reference groups the empty
    extraction as one more candidate. Neither has a setting: both only arise when the weights carry
    no information or the answer is missing."""
    from tts.types import Sample

    wv = WeightedVote(WeightedVoteConfig(n=3, verifier="prm"), ScriptedGenerator({}), MATH_PROMPT.render)
    samples = [Sample("a", "5", 10, -0.5), Sample("b", "3", 10, -0.5), Sample("c", "3", 10, -0.5)]
    sol = wv.aggregate("p", samples, Usage(), scores=[0.0, 0.0, 0.0])
    assert sol.answer == "3" and sol.trace.events == {"unweighted_vote": 1}
    assert sal_weighted_answer(["5", "3", "3"], [[0.0]] * 3, "last")[0] == "5"
    samples = [Sample("a", None, 10, -0.5), Sample("b", "3", 10, -0.5), Sample("c", None, 10, -0.5)]
    sol = wv.aggregate("p", samples, Usage(), scores=[0.6, 0.5, 0.6])
    assert sol.answer == "3"
    assert sal_weighted_answer(["", "3", ""], [[0.6], [0.5], [0.6]], "last")[0] == ""
