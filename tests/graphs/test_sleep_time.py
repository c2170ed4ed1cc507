"""Sleep-time compute as a graph on the scripted backend: notes written once per shared context
(across batches), charged to the first question of the context, read by every question."""

from __future__ import annotations

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.demo import generate_problems as demo_problems
from tts.benchmarks.stories import QUERIES_PER_STORY, STORIES_PROMPT, StoriesBenchmark, generate_problems
from tts.config import SamplingConfig
from tts.graphs.executor import GraphExecutor
from tts.graphs.graph import load_graph_file
from tts.graphs.notes import split_context

SPEC = load_graph_file("examples/graphs/sleep_time.yaml")


def _notes_requests(gen):
    return [r for r in gen.requests if r.key.startswith("context:")]


def test_the_stories_benchmark_shares_each_story_across_five_questions():
    problems = StoriesBenchmark().load(limit=12)
    assert len(problems) == 12 and problems == generate_problems(12)
    contexts = [split_context(p.question, "Question:")[0] for p in problems]
    assert len(set(contexts)) == 3 and contexts[:QUERIES_PER_STORY] == [contexts[0]] * QUERIES_PER_STORY
    first = problems[0]
    assert first.question.endswith("have now?") and int(first.answer) >= 0
    # the story's facts determine the gold answer: "X has a ... X gets b more" -> a + b
    assert split_context(first.question, "Question:")[1].startswith("Question: How many")


def test_notes_are_written_once_per_context_across_batches_and_charged_once():
    problems = generate_problems(10)  # two stories
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.6))
    executor = GraphExecutor(SPEC, STORIES_PROMPT.render, SamplingConfig(max_tokens=300), seed=0)
    sols = executor.run(problems[:3], {"policy": gen}) + executor.run(problems[3:], {"policy": gen})
    notes = _notes_requests(gen)
    assert len(notes) == 2  # story 0 in the first batch; story 1 in the second; story 0 not again
    for req in notes:
        assert "Question:" not in req.messages[-1].content and req.n == 1
    note_tokens = [next(e for e in s.trace.tree if e["id"] == "notes")["completion_tokens"] for s in sols]
    assert [t > 0 for t in note_tokens] == [True, False, False, False, False, True, False, False, False, False]
    assert [s.trace.events.get("notes_reused", 0) for s in sols] == [0, 1, 1, 1, 1, 0, 1, 1, 1, 1]
    # every question's reader sees the story, the notes and its own question; the usage sums to what was sent
    notes_text = {s.problem_id: next(e for e in s.trace.tree if e["id"] == "notes:0")["text"] for s in sols}
    readers = [r for r in gen.requests if not r.key.startswith("context:")]
    assert len(readers) == 10 and all(r.n == 2 for r in readers)
    for r, p in zip(readers, problems, strict=True):
        prompt = r.messages[-1].content
        story, query = split_context(p.question, "Question:")
        assert prompt.startswith(story) and notes_text[p.id].strip() in prompt and prompt.endswith(query)
    assert sum(s.usage.calls for s in sols) == len(gen.requests) == 12
    total = sum(s.usage.total_tokens for s in sols)
    assert total == sum(s.usage.prompt_tokens + s.usage.completion_tokens for s in sols)


def test_on_the_demo_every_question_is_its_own_context():
    problems = demo_problems(4)
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems))
    sols = GraphExecutor(SPEC, STORIES_PROMPT.render, seed=0).run(problems, {"policy": gen})
    assert len(_notes_requests(gen)) == 4 and all(s.trace.events.get("notes_reused", 0) == 0 for s in sols)
    readers = [r for r in gen.requests if not r.key.startswith("context:")]
    assert all(r.messages[-1].content.endswith(p.question) for r, p in zip(readers, problems, strict=True))


def test_a_question_splits_at_its_last_marker_and_one_that_starts_with_it_shares_nothing():
    assert split_context("A story. Question: first? Question: second?", "Question:") == (
        "A story. Question: first?", "Question: second?")
    assert split_context("Question: alone?", "Question:") == ("Question: alone?", "Question: alone?")
    assert split_context("No marker here.", "Question:") == ("No marker here.", "No marker here.")


def test_a_note_taker_asks_once_with_its_own_prompt(tmp_path):
    (tmp_path / "g.yaml").write_text("name: notes_n\nnodes:\n"
                                     "  notes: {role: note_taker, max_tokens: 64, prompt: \"Notes please:\\n{context}\"}\n"
                                     "  answer: {role: note_reader, inputs: [notes], n: 2}\n")
    problems = generate_problems(3)  # one story, three questions
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems))
    sols = GraphExecutor(load_graph_file(tmp_path / "g.yaml"), STORIES_PROMPT.render, seed=0).run(problems, {"policy": gen})
    (req,) = _notes_requests(gen)
    story = split_context(problems[0].question, "Question:")[0]
    assert req.n == 1 and req.messages[-1].role == "user" and req.messages[-1].content == f"Notes please:\n{story}"
    assert [s.trace.events for s in sols] == [{"notes_written": 1}, {"notes_reused": 1}, {"notes_reused": 1}]
    for s in sols:
        tree = {e["id"]: e for e in s.trace.tree}
        assert tree["notes:0"]["kind"] == "note" and tree["notes:0"]["completion_tokens"] > 0
        assert {"answer:0", "answer:1"} <= set(tree)


def test_a_note_graph_wired_wrong_says_what_each_role_reads(tmp_path):
    import pytest

    from tts.graphs.graph import GraphError

    cases = {"notes: {role: note_taker}\n  other: {role: note_taker, inputs: [notes]}\n  answer: {role: note_reader, inputs: [notes]}\n":
             "a note_taker takes no inputs (it reads the question's shared context)",
             "notes: {role: note_taker}\n  answer: {role: note_reader, inputs: [notes, notes]}\n":
             "a note_reader reads one input: the note_taker whose notes it uses"}
    for nodes, message in cases.items():
        (tmp_path / "g.yaml").write_text(f"name: wrong\nnodes:\n  {nodes}")
        with pytest.raises(GraphError) as err:
            load_graph_file(tmp_path / "g.yaml")
        assert str(err.value).endswith(f": {message}")


def test_questions_of_two_stories_in_one_batch_each_read_their_own_storys_notes():
    problems = generate_problems(10)
    batch = [problems[0], problems[5], problems[1], problems[6]]  # story 0, story 1, story 0, story 1
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems))
    sols = GraphExecutor(SPEC, STORIES_PROMPT.render, seed=0).run(batch, {"policy": gen})
    notes = [next(e for e in s.trace.tree if e["id"] == "notes:0")["text"] for s in sols]
    assert notes[0] == notes[2] and notes[1] == notes[3] and notes[0] != notes[1]


def test_a_marker_one_character_in_still_splits_off_that_context():
    assert split_context("x|how many?", "|") == ("x", "|how many?")
    assert split_context("|how many?", "|") == ("|how many?", "|how many?")


class _BlankNotes:
    """Writes empty notes and answers every question with 7."""

    model_name = "blank"

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        from tts.backends.base import Completion, GenerationResult
        from tts.types import Usage

        self.requests += requests
        return [GenerationResult(tuple(Completion("" if r.key.startswith("context:") else "It is 7", 3)
                                       for _ in range(r.n)), Usage()) for r in requests]

    def close(self):
        pass


def test_empty_notes_reach_the_reader_as_none_under_the_story_and_above_the_question():
    from tts.types import Problem

    problems = [Problem("s0", "Ann has 3 shells.\nQuestion: How many shells?", "3"),
                Problem("s1", "Ann has 3 shells.\nQuestion: Who has shells?", "Ann")]
    gen = _BlankNotes()
    sols = GraphExecutor(SPEC, STORIES_PROMPT.render, seed=0).run(problems, {"policy": gen})
    readers = [r for r in gen.requests if not r.key.startswith("context:")]
    assert [r.messages[-1].content for r in readers] == [
        "Ann has 3 shells.\n\nNotes on the text:\n(none)\n\nQuestion: How many shells?",
        "Ann has 3 shells.\n\nNotes on the text:\n(none)\n\nQuestion: Who has shells?"]
    assert [s.answer for s in sols] == ["7", "7"]


def test_a_question_whose_notes_were_never_read_asks_for_them_again():
    from tts.backends.base import Message
    from tts.graphs.graph import NodeSpec
    from tts.graphs.notes import NoteTaker
    from tts.graphs.roles import NodeContext
    from tts.types import Problem

    ctx = NodeContext("notes", NodeSpec(role="note_taker"), lambda p: (Message("user", p.question),),
                      lambda t: None, 0.0, 1.0, 64, 0)
    taker = NoteTaker()
    first = Problem("s0", "A story.\nQuestion: one?")
    (req,) = taker.plan(ctx, first, [])
    # the batch failed before the notes came back: the same question, run again, asks again
    assert taker.plan(ctx, first, []) == [req]
    # another question of the story in the same batch leaves the notes to the first
    assert taker.plan(ctx, Problem("s1", "A story.\nQuestion: two?"), []) == []


def test_a_batch_that_failed_before_its_notes_came_back_leaves_the_next_batch_its_notes():
    """A long-lived strategy (the server's) runs batch after batch: a backend error between planning
    and reading the notes must not leave the story's notes reserved for a question that is gone."""
    from tts.backends.base import BackendError

    problems = generate_problems(5)  # one story, five questions
    gen = RecordingGenerator(ScriptedGenerator.for_problems(problems, accuracy=0.6))

    class FailsOnce:
        model_name = gen.model_name
        failed = False

        def generate(self, requests):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise BackendError("the server went away")
            return gen.generate(requests)

    executor = GraphExecutor(SPEC, STORIES_PROMPT.render, SamplingConfig(max_tokens=300), seed=0)
    with pytest.raises(BackendError, match="went away"):
        executor.run(problems[:1], {"policy": FailsOnce()})
    sols = executor.run(problems[1:], {"policy": FailsOnce()})
    assert len(_notes_requests(gen)) == 1  # the second question now pays for the story's notes
    assert [s.trace.events.get("notes_reused", 0) for s in sols] == [0, 1, 1, 1]
    notes_text = [next(e for e in s.trace.tree if e["id"] == "notes:0")["text"] for s in sols]
    assert len(set(notes_text)) == 1 and notes_text[0].strip()
