"""Each graph role on hand-made candidates and replies, without an executor: the requests it plans
(prompt, sampling, seed, key), how it reads replies into candidates and scores, and its refusals.
Every expected value is worked out by hand from the inputs below."""

from __future__ import annotations

import math
import re

import pytest

from tts.backends.base import Completion, GenerationResult, Message, derive_seed
from tts.graphs.graph import NodeSpec
from tts.graphs.roles import (
    Aggregator,
    Candidate,
    Critic,
    Fuser,
    GeneratorRole,
    NodeContext,
    Ranker,
    Reviser,
    Role,
    Selector,
    VerifierRole,
    Voter,
    _number_choice,
    numbered,
    pick,
    solutions,
    yes_score,
)
from tts.types import Problem, Usage

PROBLEM = Problem("p1", "What is 2 + 3?", "5")
QUESTION = "Q: What is 2 + 3?"  # the benchmark prompt's last user message


def _prompt(problem):
    return (Message("system", "Be brief."), Message("user", f"Q: {problem.question}"))


def _extract(text):
    numbers = re.findall(r"\d+", text)
    return numbers[-1] if numbers else None


def _ctx(role="generator", name="node", **spec):
    return NodeContext(name, NodeSpec(role=role, **spec), _prompt, _extract, 0.7, 0.9, 100, 11)


def _result(*completions):
    return GenerationResult(tuple(completions), Usage())


def _sol(cid, text=None, score=None, answer=None):
    return Candidate(cid, cid.split(":")[0], text or f"text of {cid}", answer=answer, score=score)


def test_origin_walks_back_through_scores_and_votes_to_the_written_solution():
    a = Candidate("g:0", "g", "sol", answer="5")
    scored = Candidate("v:0", "v", "sol", answer="5", score=0.9, about=a, written=False)
    voted = Candidate("w:0", "w", "sol", answer="5", score=1.0, about=scored, written=False)
    assert voted.origin() is a and scored.origin() is a and a.origin() is a
    critique = Candidate("c:0", "c", "step 2 is wrong", kind="critique", about=a)  # written here
    assert critique.origin() is critique
    loose = Candidate("x:0", "x", "", written=False)  # passes nothing on
    assert loose.origin() is loose


def test_a_nodes_request_carries_its_sampling_and_a_seed_per_problem_node_and_index():
    ctx = _ctx(n=3)
    messages = (Message("user", "hi"),)
    req = ctx.request(PROBLEM, messages, 2)
    assert (req.messages, req.n, req.temperature, req.top_p, req.max_tokens, req.key) == (
        messages, 3, 0.7, 0.9, 100, "p1")
    assert req.seed == derive_seed(11, "p1|node", 2)
    seeds = {req.seed, ctx.request(PROBLEM, messages, 1).seed, _ctx(name="other", n=3).request(PROBLEM, messages, 2).seed,
             ctx.request(Problem("p2", "?"), messages, 2).seed}
    assert len(seeds) == 4
    # keywords override the node's settings; the seed stays the node's
    req = ctx.request(PROBLEM, messages, 0, n=1, key="context:x", temperature=0.0, role="verifier")
    assert (req.n, req.key, req.temperature, req.top_p, req.max_tokens, req.role) == (1, "context:x", 0.0, 0.9, 100,
                                                                                      "verifier")
    assert req.seed == derive_seed(11, "p1|node", 0)


def test_a_generated_candidate_carries_its_reply_and_only_a_solution_has_an_answer():
    ctx = _ctx()
    reply = Completion("so it is 5", 7, None, "length")
    sol = ctx.solution(3, "so it is 5", reply)
    assert sol == Candidate("node:3", "node", "so it is 5", answer="5", kind="solution", completion_tokens=7,
                            finish_reason="length")
    critique = ctx.solution(0, "step 2 should give 5", reply, about=sol, kind="critique")
    assert (critique.id, critique.answer, critique.kind, critique.about, critique.completion_tokens) == (
        "node:0", None, "critique", sol, 7)


def test_a_yes_score_is_p_yes_of_one_greedy_token_or_the_share_of_sampled_yes_verdicts():
    greedy = _result(Completion("Yes", 1, first_token_top_logprobs={"Yes": math.log(0.6), "No": math.log(0.2)}))
    assert yes_score(greedy, sampled=False) == pytest.approx(0.75)  # 0.6 / (0.6 + 0.2)
    assert yes_score(_result(), sampled=False) is None
    assert yes_score(_result(Completion("Yes", 1)), sampled=False) is None  # no logprobs came back
    sampled = _result(Completion("Looks right.\nYes", 5), Completion("Step 2 is wrong.\nNo", 5),
                      Completion("Fine. Yes", 5), Completion("It is Yes", 5, None, "length"), Completion("hmm", 3))
    assert yes_score(sampled, sampled=True) == pytest.approx(2 / 3)  # Yes, No, Yes; cut off and no verdict skipped
    assert yes_score(_result(Completion("hmm", 3)), sampled=True) is None
    # Yes mass past the largest float: P(Yes) reads inf / inf, which is no score
    huge = {"Yes": 709.0, " yes": 709.0, "YES": 709.0, "No": 0.0}
    assert yes_score(_result(Completion("Yes", 1, first_token_top_logprobs=huge)), sampled=False) is None


def test_solutions_and_pick_take_solutions_round_robin_best_scored_first():
    critique = Candidate("c:0", "c", "bad", kind="critique")
    first = [_sol("a:0"), _sol("a:1", score=0.9), critique]
    second = [_sol("b:0", score=0.2), _sol("b:1", score=0.8)]
    assert [c.id for c in solutions([first, second])] == ["a:0", "a:1", "b:0", "b:1"]
    assert [c.id for c in pick([first, second], 3)] == ["a:1", "b:1", "a:0"]
    assert [c.id for c in pick([first, second], 10)] == ["a:1", "b:1", "a:0", "b:0"]
    assert [c.id for c in pick([[critique], second], 1)] == ["b:1"]
    assert pick([[critique]], 4) == []


def test_numbered_shows_each_candidate_stripped_under_its_number():
    shown = [Candidate("a:0", "a", "  x = 1\n"), Candidate("a:1", "a", "y\n\n")]
    assert numbered(shown) == "Solution 1:\nx = 1\n\nSolution 2:\ny"


@pytest.mark.parametrize(("role", "produced", "message"), [
    (Critic, [], "a critic needs inputs (inputs: [NODE, ...]): it works on other nodes' solutions"),
    (Fuser, ["solution", "critique"],
     "a fuser reads solutions, but an input writes critiques; feed critiques to a reviser"),
    (Fuser, ["subproblem"], "a fuser reads solutions, but an input writes subproblems; feed subproblems to a subsolver or assessor"),
    (Voter, ["solution", "assessment"],
     "a voter reads solutions, but an input writes assessments; feed assessments to a subsolver"),
    (Ranker, ["note"], "a ranker reads solutions, but an input writes notes; feed notes to a note_reader"),
    (Critic, ["poem"], "a critic reads solutions, but an input writes poems; feed poems to a role that reads them"),
    (Fuser, ["solution", "solution"], None),
    (GeneratorRole, ["solution"], "a generator takes no inputs (it solves from the problem alone); make it a reviser or fuser"),
    (GeneratorRole, [], None),
    (Reviser, [], "a reviser needs inputs: first the node whose solutions it revises, then critics or peers"),
    (Reviser, ["critique", "solution"],
     "a reviser revises its first input's solutions, but its first input writes critiques; list the solutions' node first"),
    (Reviser, ["solution", "critique"], None),
])
def test_what_a_role_takes_as_inputs(role, produced, message):
    assert role.check_inputs(produced) == message


def test_settings_a_judge_cannot_use_are_refused():
    verifier = ("with n = 1 a verifier reads P(Yes) from one greedy token, so temperature and max_tokens do not apply; "
                "remove them, or set n > 1 to sample reasoned verdicts")
    assert VerifierRole.check_settings(NodeSpec(role="verifier", temperature=0.5)) == verifier
    assert VerifierRole.check_settings(NodeSpec(role="verifier", max_tokens=8)) == verifier
    assert VerifierRole.check_settings(NodeSpec(role="verifier")) is None
    assert VerifierRole.check_settings(NodeSpec(role="verifier", n=2, temperature=0.5, max_tokens=8)) is None
    assert Ranker.check_settings(NodeSpec(role="ranker", max_candidates=10)) == (
        "a ranker reads a one-digit number, so max_candidates must be at most 9")
    assert Ranker.check_settings(NodeSpec(role="ranker", max_candidates=9)) is None
    assert Selector.check_settings(NodeSpec(role="selector", max_candidates=10)) == (
        "a selector reads a one-digit number, so max_candidates must be at most 9")
    assert Selector.check_settings(NodeSpec(role="selector", max_candidates=1)) == (
        "a selector picks one of a group, so max_candidates must be at least 2")
    assert Selector.check_settings(NodeSpec(role="selector", max_candidates=2)) is None
    assert Selector.check_settings(NodeSpec(role="selector", max_candidates=9)) is None
    assert Role.check_settings(NodeSpec(role="fuser")) is None


def test_a_generator_sends_the_benchmark_prompt_or_its_own_in_place_of_the_last_message():
    (req,) = GeneratorRole().plan(_ctx(n=2), PROBLEM, [])
    assert req.messages == _prompt(PROBLEM) and req.n == 2 and req.seed == derive_seed(11, "p1|node", 0)
    (req,) = GeneratorRole().plan(_ctx(prompt="Solve: {question}"), PROBLEM, [])
    assert req.messages == (Message("system", "Be brief."), Message("user", f"Solve: {QUESTION}"))
    out = GeneratorRole().read(_ctx(), PROBLEM, [], [_result(Completion("it is 5", 4), Completion("maybe 6", 3))])
    assert [(c.id, c.answer, c.completion_tokens) for c in out.candidates] == [("node:0", "5", 4), ("node:1", "6", 3)]
    assert out.events == {} and out.votes == {}


def test_a_critic_asks_once_per_input_solution_and_its_critiques_are_about_them():
    a, b = _sol("a:0", "  A says 5 \n", answer="5"), _sol("b:0", "B says 6", answer="6")
    inputs = [[a, Candidate("c:0", "c", "no", kind="critique")], [b]]
    ctx = _ctx("critic", name="crit")
    reqs = Critic().plan(ctx, PROBLEM, inputs)
    assert [r.seed for r in reqs] == [derive_seed(11, "p1|crit", 0), derive_seed(11, "p1|crit", 1)]
    assert reqs[0].messages == (Message("system", "Be brief."), Message("user", (
        f"{QUESTION}\n\nA proposed solution:\nA says 5\n\nCheck this solution step by step. Say which step is wrong, "
        "if any, and why. Do not write a new solution.")))
    assert "A proposed solution:\nB says 6\n\n" in reqs[1].messages[-1].content
    out = Critic().read(ctx, PROBLEM, inputs, [_result(Completion("step 1 ok", 2), Completion("fine 7", 2)),
                                               _result(Completion("wrong", 1))])
    assert [(c.id, c.kind, c.answer, c.about.id) for c in out.candidates] == [
        ("crit:0", "critique", None, "a:0"), ("crit:1", "critique", None, "a:0"), ("crit:2", "critique", None, "b:0")]


def test_a_reviser_reads_the_critiques_of_its_solution_and_its_best_peers():
    s1, s2 = _sol("g:0", "first try 4", answer="4"), _sol("g:1", "second try 6", answer="6")
    judged = Candidate("v:1", "v", s2.text, answer="6", score=0.2, about=s2, written=False)
    critiques = [Candidate("c:0", "c", " step 2 adds wrong \n", kind="critique", about=s1),
                 Candidate("c:1", "c", "4 is not 2 + 3", kind="critique", about=s1),
                 Candidate("c:2", "c", "6 is too big", kind="critique", about=judged)]
    peers = [_sol("p:0", "peer says 7", score=0.1), _sol("p:1", " peer says 5 ", score=0.9)]
    ctx = _ctx("reviser", name="rev", max_candidates=1)
    reviser = Reviser()
    context = reviser._context(ctx, s1, [[s1, s2], critiques, peers])
    assert context == "Feedback on it:\nstep 2 adds wrong\n\nAnother solver's solution:\npeer says 5"
    # the critique of a judged copy of s2 is about s2
    assert reviser._context(_ctx("reviser", max_candidates=4), s2, [[s1, s2], critiques]) == (
        "Feedback on it:\n6 is too big")
    assert reviser._context(ctx, s1, [[s1, s2]]) == "Check it for mistakes."
    # only the first input's solutions are revised; the peers' are read
    reqs = reviser.plan(ctx, PROBLEM, [[s1, s2], peers, critiques])
    assert len(reqs) == 2 and reqs[1].seed == derive_seed(11, "p1|rev", 1)
    assert reqs[0].messages[-1] == Message("user", (
        f"{QUESTION}\n\nA previous solution:\nfirst try 4\n\nFeedback on it:\nstep 2 adds wrong\n\n"
        "Another solver's solution:\npeer says 5\n\nWrite a corrected, complete solution."))
    out = reviser.read(ctx, PROBLEM, [[s1, s2], peers, critiques],
                       [_result(Completion("now 5", 3)), _result(Completion("still 6", 2), Completion("5", 1))])
    assert [(c.id, c.answer, c.about.id, c.written) for c in out.candidates] == [
        ("rev:0", "5", "g:0", True), ("rev:1", "6", "g:1", True), ("rev:2", "5", "g:1", True)]


def test_a_fuser_shows_its_picked_candidates_numbered_in_one_request():
    inputs = [[_sol("a:0", "A 5", score=0.1), _sol("a:1", "A 6", score=0.3)], [_sol("b:0", "B 5")]]
    ctx = _ctx("fuser", name="fuse", n=2, max_candidates=2)
    (req,) = Fuser().plan(ctx, PROBLEM, inputs)
    assert req.n == 2 and req.seed == derive_seed(11, "p1|fuse", 0)
    assert req.messages == (Message("system", "Be brief."), Message("user", (
        f"{QUESTION}\n\nSolutions from several solvers:\n\nSolution 1:\nA 6\n\nSolution 2:\nB 5\n\n"
        "Some of them may be wrong. Write the correct solution in full, ending with its final answer.")))
    out = Fuser().read(ctx, PROBLEM, inputs, [_result(Completion("so 5", 2), Completion("so 6", 2))])
    assert [(c.id, c.answer) for c in out.candidates] == [("fuse:0", "5"), ("fuse:1", "6")]


def test_a_verifier_asks_for_one_greedy_token_or_sampled_verdicts_and_scores_each_solution():
    a, b = _sol("g:0", " A 5 ", answer="5"), _sol("g:1", "B 6", answer="6")
    one = _ctx("verifier", name="ver")
    reqs = VerifierRole().plan(one, PROBLEM, [[a, b]])
    assert [(r.temperature, r.max_tokens, r.top_logprobs, r.role, r.n) for r in reqs] == [(0.0, 1, 10, "verifier", 1)] * 2
    assert [r.seed for r in reqs] == [derive_seed(11, "p1|ver", 0), derive_seed(11, "p1|ver", 1)]
    assert reqs[0].messages == (Message("user", f"Problem:\n{QUESTION}\n\nSolution:\nA 5\n\nIs this solution correct? "
                                                "Answer Yes or No."),)
    sampled = _ctx("verifier", name="ver", n=3)
    reqs = VerifierRole().plan(sampled, PROBLEM, [[a, b]])
    assert [(r.temperature, r.max_tokens, r.top_logprobs, r.role, r.n) for r in reqs] == [(0.7, 100, 0, "verifier", 3)] * 2
    assert [r.seed for r in reqs] == [derive_seed(11, "p1|ver", 0), derive_seed(11, "p1|ver", 1)]
    assert reqs[1].messages == (Message("user", f"Problem:\n{QUESTION}\n\nSolution:\nB 6\n\nIs this solution correct? "
                                                "Check it briefly, then end your reply with Yes or No."),)
    own = _ctx("verifier", n=3, prompt="{question} / {solution} ok?")
    assert VerifierRole().plan(own, PROBLEM, [[a]])[0].messages == (Message("user", f"{QUESTION} / A 5 ok?"),)
    # a few-shot prompt: the question is its last message, not its second
    shots = NodeContext("ver", NodeSpec(role="verifier", n=2, prompt="{question} / {solution}"),
                        lambda p: (Message("user", "1 + 1?"), Message("assistant", "2"), Message("user", p.question)),
                        _extract, 0.7, 0.9, 100, 11)
    assert VerifierRole().plan(shots, PROBLEM, [[a]])[0].messages == (Message("user", "What is 2 + 3? / A 5"),)
    yes = {"Yes": math.log(0.3), "No": math.log(0.1)}
    out = VerifierRole().read(one, PROBLEM, [[a, b]], [_result(Completion("Yes", 1, first_token_top_logprobs=yes)),
                                                       _result(Completion("Maybe", 1))])
    assert [(c.id, c.text, c.answer, c.about, c.written) for c in out.candidates] == [
        ("ver:0", " A 5 ", "5", a, False), ("ver:1", "B 6", "6", b, False)]
    assert [c.score for c in out.candidates] == [pytest.approx(0.75), 0.5]  # unreadable: 0.5, counted
    assert out.events == {"invalid_verdict": 1}
    out = VerifierRole().read(sampled, PROBLEM, [[a]], [_result(Completion("ok\nYes", 2), Completion("No", 1),
                                                                Completion("Yes", 1), Completion("Yes", 1))])
    assert out.candidates[0].score == pytest.approx(0.75) and out.events == {}
    # n = 2 already samples reasoned verdicts (no first-token logprobs are asked for)
    two = _ctx("verifier", name="ver", n=2)
    out = VerifierRole().read(two, PROBLEM, [[a]], [_result(Completion("Right.\nYes", 2), Completion("Yes", 1))])
    assert out.candidates[0].score == 1.0 and out.events == {}


def test_a_number_choice_reads_first_token_probabilities_or_else_the_first_number_written():
    tokens = {" 2": math.log(0.4), "1.": math.log(0.25), "**3**": math.log(0.125), "7": math.log(0.1),
              "x": math.log(0.05), "0": math.log(0.05), "2)": -math.inf, "#2": math.log(0.1), "X1": math.log(0.05)}
    probs = _number_choice(Completion("", 1, first_token_top_logprobs=tokens), 3)
    # " 2" and "#2" add up; 7 and 0 are not shown; "X1" is no number; -inf adds nothing
    assert probs == pytest.approx([0.25, 0.5, 0.125])
    assert _number_choice(Completion("I pick 3, not 1", 4), 3) == [0.0, 0.0, 1.0]
    assert _number_choice(Completion("Solution 4", 2), 3) == [0.0, 0.0, 0.0]
    assert _number_choice(Completion("0", 1), 3) == [0.0, 0.0, 0.0]
    assert _number_choice(Completion("none", 1), 2) == [0.0, 0.0]
    # probabilities of no shown number: the text decides
    off = {"9": math.log(0.9)}
    assert _number_choice(Completion("2", 1, first_token_top_logprobs=off), 3) == [0.0, 1.0, 0.0]


def test_a_ranker_scores_each_shown_solution_by_the_mean_choice_of_the_replies_that_name_one():
    a, b, c = _sol("g:0", "A 5", answer="5"), _sol("g:1", "B 6", answer="6"), _sol("h:0", "C 7", answer="7")
    ctx = _ctx("ranker", name="rank", max_candidates=2)
    inputs = [[a, b], [c]]
    (req,) = Ranker().plan(ctx, PROBLEM, inputs)  # shows a (first of g) and c (first of h)
    assert req.top_logprobs == 10 and req.seed == derive_seed(11, "p1|rank", 0)
    assert req.messages == (Message("user", f"Problem:\n{QUESTION}\n\nSolution 1:\nA 5\n\nSolution 2:\nC 7\n\n"
                                            "Which solution is correct? Answer with its number only."),)
    replies = _result(Completion("1", 1, first_token_top_logprobs={"1": math.log(0.6), "2": math.log(0.2)}),
                      Completion("2", 1), Completion("neither", 1))
    out = Ranker().read(ctx, PROBLEM, inputs, [replies])
    # reply 1: 0.75 / 0.25; reply 2: 0 / 1; reply 3 names none: (0.75, 1.25) / 2
    assert [(x.id, x.text, x.answer, x.about, x.written) for x in out.candidates] == [
        ("rank:0", "A 5", "5", a, False), ("rank:1", "C 7", "7", c, False)]
    assert [x.score for x in out.candidates] == pytest.approx([0.375, 0.625]) and out.events == {}
    out = Ranker().read(ctx, PROBLEM, inputs, [_result(Completion("neither", 1))])
    assert [x.score for x in out.candidates] == [0.5, 0.5] and out.events == {"invalid_rank": 1}
    # one solution shown and no reply naming it: it keeps the whole score
    out = Ranker().read(ctx, PROBLEM, [[a]], [_result(Completion("neither", 1))])
    assert [x.score for x in out.candidates] == [1.0] and out.events == {"invalid_rank": 1}


def test_a_voter_weighs_by_scores_only_when_every_input_is_scored():
    ctx = _ctx("voter", name="vote")
    s5, s6a, s6b = _sol("v:0", "five", 0.9, "5"), _sol("v:1", "six", 0.2, "6"), _sol("v:2", "six!", 0.3, "6")
    assert Voter().plan(ctx, PROBLEM, [[s5, s6a, s6b]]) == []
    out = Voter().read(ctx, PROBLEM, [[s5, s6a, s6b]], [])
    assert out.candidates == (Candidate("vote:0", "vote", "five", answer="5", score=pytest.approx(0.9 / 1.4), about=s5,
                                        written=False),)
    assert out.votes == pytest.approx({"5": 0.9, "6": 0.5}) and out.events == {}
    unscored = _sol("v:2", "six!", None, "6")
    out = Voter().read(ctx, PROBLEM, [[s5], [s6a, unscored]], [])
    (winner,) = out.candidates
    assert (winner.text, winner.answer, winner.score, winner.about) == ("six", "6", pytest.approx(2 / 3), s6a)
    assert out.votes == {"5": 1.0, "6": 2.0}
    out = Voter().read(ctx, PROBLEM, [[_sol("v:0", "no idea")]], [])
    assert out.candidates == (Candidate("vote:0", "vote", "", score=0.0, written=False),)
    assert out.events == {"no_answer": 1}
    assert Voter().read(ctx, PROBLEM, [[]], []).events == {"no_answer": 1}


def test_a_selector_picks_in_groups_and_a_group_of_one_passes_on_without_a_request():
    sols = [_sol(f"g:{i}", f"S{i}", answer=str(i)) for i in range(5)]
    ctx = _ctx("selector", name="sel", max_candidates=2)
    assert Selector.groups(ctx, [sols[:3], sols[3:]]) == [sols[0:2], sols[2:4], sols[4:]]
    reqs = Selector().plan(ctx, PROBLEM, [sols])
    assert len(reqs) == 2 and [r.seed for r in reqs] == [derive_seed(11, "p1|sel", 0), derive_seed(11, "p1|sel", 1)]
    assert all(r.top_logprobs == 10 for r in reqs)
    assert reqs[1].messages == (Message("user", (
        f"Problem:\n{QUESTION}\n\nSolution 1:\nS2\n\nSolution 2:\nS3\n\nCompare the solutions above carefully. "
        "Which solution is correct? Answer with its number only.")),)
    results = [_result(Completion("2", 1), Completion("Solution 2", 1), Completion("1", 1), Completion("??", 1)),
               _result(Completion("no idea", 1))]
    out = Selector().read(ctx, PROBLEM, [sols], results)
    # group 1: 2, 2, 1 named (the fourth names none) -> (1/3, 2/3); group 2 named none -> its first; group 3 alone
    assert [(c.id, c.about, c.written) for c in out.candidates] == [
        ("sel:0", sols[1], False), ("sel:1", sols[2], False), ("sel:2", sols[4], False)]
    assert [c.score for c in out.candidates] == pytest.approx([2 / 3, 1.0, 1.0])
    assert [c.answer for c in out.candidates] == ["1", "2", "4"]
    assert out.events == {"invalid_selection": 1}
    # first-token probabilities are normalised over the group: 0.3 and 0.1 read as 3/4 and 1/4
    odds = {"1": math.log(0.3), "2": math.log(0.1)}
    out = Selector().read(ctx, PROBLEM, [sols[:2]], [_result(Completion("", 1, first_token_top_logprobs=odds))])
    assert out.candidates[0].about is sols[0] and out.candidates[0].score == pytest.approx(0.75)
    # a tie goes to the earlier solution; no unread group, no event
    out = Selector().read(ctx, PROBLEM, [sols[:2]], [_result(Completion("2", 1), Completion("1", 1))])
    assert out.candidates[0].about is sols[0] and out.candidates[0].score == 0.5 and out.events == {}


def test_an_aggregator_shows_each_request_its_own_seeded_subset():
    sols = [_sol(f"g:{i}", f"S{i}") for i in range(4)]
    ctx = _ctx("aggregator", name="agg", n=3, max_candidates=2)
    subsets = Aggregator().subsets(ctx, PROBLEM, [sols[:2], sols[2:]])
    assert len(subsets) == 3 and all(len(s) == 2 and len(set(c.id for c in s)) == 2 for s in subsets)
    assert subsets == Aggregator().subsets(ctx, PROBLEM, [sols[:2], sols[2:]])
    def ids(subsets):
        return tuple(tuple(c.id for c in s) for s in subsets)

    # the subsets follow the run's seed, and differ between problems and between nodes
    by_seed = {ids(Aggregator().subsets(NodeContext("agg", ctx.spec, _prompt, _extract, 0.7, 0.9, 100, seed), PROBLEM,
                                        [sols])) for seed in range(6)}
    by_problem = {ids(Aggregator().subsets(ctx, Problem(f"p{i}", "?"), [sols])) for i in range(6)}
    by_node = {ids(Aggregator().subsets(_ctx("aggregator", name=f"agg{i}", n=3, max_candidates=2), PROBLEM, [sols]))
               for i in range(6)}
    assert len(by_seed) > 1 and len(by_problem) > 1 and len(by_node) > 1
    # fewer solutions than max_candidates: every request sees them all
    few = Aggregator().subsets(_ctx("aggregator", n=2, max_candidates=4), PROBLEM, [sols[:3]])
    assert [sorted(c.id for c in s) for s in few] == [["g:0", "g:1", "g:2"]] * 2
    reqs = Aggregator().plan(ctx, PROBLEM, [sols])
    shown = Aggregator().subsets(ctx, PROBLEM, [sols])
    assert [r.n for r in reqs] == [1, 1, 1] and [r.seed for r in reqs] == [derive_seed(11, "p1|agg", i) for i in range(3)]
    assert [r.messages[-1].content for r in reqs] == [Fuser.template.format(question=QUESTION, candidates=numbered(s))
                                                      for s in shown]
    out = Aggregator().read(ctx, PROBLEM, [sols], [_result(Completion("a 5", 2), Completion("ignored 9", 2)),
                                                   _result(Completion("b 6", 3))])
    assert [(c.id, c.answer, c.completion_tokens) for c in out.candidates] == [("agg:0", "5", 2), ("agg:1", "6", 3)]
