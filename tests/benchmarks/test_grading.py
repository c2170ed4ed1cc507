from tts.benchmarks.grading import Grader, Outcome


def test_grades_equivalent_forms_and_counts_no_answer_separately():
    with Grader(timeout=5) as g:
        out = g.grade_many(
            [("\\frac{1}{2}", "0.5"), ("7", "7"), ("8", "7"), (None, "7"), ("", "7"), ("2\\sqrt{2}", "\\sqrt{8}")]
        )
    assert out == [Outcome.CORRECT, Outcome.CORRECT, Outcome.WRONG, Outcome.NO_ANSWER, Outcome.NO_ANSWER,
                   Outcome.CORRECT]


def test_unparseable_answer_is_wrong_not_an_error():
    with Grader(timeout=2) as g:
        assert g.grade("\\frac{{{", "3") is Outcome.WRONG
