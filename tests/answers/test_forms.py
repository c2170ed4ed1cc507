"""Answer forms math-verify misreads: currency, digit groups, row-by-row matrices, delimiters,
tuples next to vectors. Each rule is checked through the grader's own check (in-process: it is
the function the grader's worker processes run) and, where it matters for voting, through
AnswerKeys; every rule has negative cases that must stay different."""

import pytest

from tts.answers import AnswerKeys
from tts.answers.forms import align_vectors, as_math
from tts.benchmarks.grading import Grader, Outcome, _verify_in_worker

COLUMN_12 = "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"
COLUMN_3 = "\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}"
MINUS_IDENTITY = "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}"


def _equal(gold: str, answer: str) -> bool:
    return _verify_in_worker(gold, answer, 5)


@pytest.mark.parametrize(
    "gold, answer",
    [
        # currency: the sign is not part of the amount
        ("\\$18.90", "18.9"),
        ("18.90", "\\$18.9"),
        ("\\$32,\\!348", "32348"),
        ("\\$36", "36.00"),
        # digit groups separated by thin, control or plain spaces
        ("\\$32,\\!348", "32\\,348"),
        ("58,500", "58\\,500"),
        ("10000", "10\\ 000"),
        ("1000000", "1 000 000"),
        ("3.141592", "3.141\\,592"),
        # a matrix written row by row: "&" separates columns, "," rows
        (MINUS_IDENTITY, "(-1&0,0&-1)"),
        (MINUS_IDENTITY, "-(1&0,0&1)"),
        # an escaped parenthesis inside an answer is not a math delimiter
        ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2)\\\\cup\\(3,\\infty)"),
        # a tuple names the vector with the same entries in the same order
        (COLUMN_3, "(-2,-14,-7)"),
        (COLUMN_3, "[-2,-14,-7]"),
        ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "(\\frac{1}{5},-\\frac{18}{5})"),
        (COLUMN_12, "(1,2)"),  # math-verify reads "(1,2)" as an open interval
        (COLUMN_12, "[1,2]"),
        (COLUMN_12, "\\mathbf{v} = (1, 2)"),
        ("(1,2)", COLUMN_12),
        ("\\begin{pmatrix} 1 & 2 \\end{pmatrix}", "(1,2)"),  # a row vector too
        # forms math-verify already read, kept working
        ("30^\\circ", "30"),
        ("5\\text{ cm}", "5"),
        ("\\frac{1}{2}", "0.5"),
    ],
)
def test_surface_forms_of_one_value_grade_equal(gold, answer):
    assert _equal(gold, answer)


@pytest.mark.parametrize(
    "gold, answer",
    [
        ("\\$32,\\!348", "3234"),
        ("\\$18.90", "18.8"),
        ("380", "32\\,348"),  # math-verify alone reads 32\,348 as 32 + 348
        ("0", "1 000"),  # ... and 1 000 as 1 * 0
        ("1234", "12\\,34"),  # not groups of three: left alone
        ("x \\in [-2,7]", "[-27]"),  # commas are not optional
        ("-2,1", "-21"),
        ("3, 5, 7", "357"),
        (MINUS_IDENTITY, "(-1&0,-1&0)"),
        (MINUS_IDENTITY, "(-1&0&0&-1)"),  # one row of four is not two rows of two
        (COLUMN_12, "(2,1)"),  # order matters in a vector
        ("(1,2)", "(2,1)"),
        (COLUMN_12, "(1,2]"),  # a half-open interval is never a pair
        (COLUMN_12, "\\{1,2\\}"),  # a set has no order
        (COLUMN_12, "1,2"),
        (COLUMN_12, "(1,2,3)"),
        ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "(1,2,3,4)"),  # a matrix is not a vector
        ("30^\\circ", "\\frac{\\pi}{6}"),
    ],
)
def test_different_values_stay_different(gold, answer):
    assert not _equal(gold, answer)


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("\\$18.90", "$18.90$"),
        ("1\\,000\\,000", "$1000000$"),
        ("1 234 567.123 45", "$1234567.12345$"),
        ("12 34", "$12 34$"),
        ("(-1&0,0&-1)", "$\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}$"),
        ("(1&2,3)", "$(1&2,3)$"),  # rows of different widths: not a matrix
        ("\\boxed{5}", "\\boxed{5}"),
        ("\\(x+1\\)", "\\(x+1\\)"),
        ("\\[x+1\\]", "\\[x+1\\]"),
        # Half a delimiter is not a math environment: wrapped.
        ("\\(x+1", "$\\(x+1$"),
        ("x+1\\)", "$x+1\\)$"),
        ("\\[x+1", "$\\[x+1$"),
        ("x+1\\]", "$x+1\\]$"),
        # A matrix already in an environment is left as it is (its rows are not re-split).
        ("\\left[\\begin{array}{cc}1&2\\\\3&4\\end{array}\\right]",
         "$\\left[\\begin{array}{cc}1&2\\\\3&4\\end{array}\\right]$"),
        ("$x+1$", "$x+1$"),
    ],
)
def test_as_math_rewrites_only_the_misread_forms(answer, expected):
    assert as_math(answer) == expected


def test_align_vectors_reads_a_tuple_as_the_other_sides_vector():
    import sympy

    column = sympy.Matrix([1, 2])
    gold, answer = align_vectors([column, "c"], [sympy.Tuple(1, 2), "t"])
    assert gold == [column, "c"] and answer == [column, "t"]
    # No vector on either side, or a tuple of another length: unchanged.
    assert align_vectors([sympy.Tuple(1, 2)], [sympy.Tuple(2, 1)]) == ([sympy.Tuple(1, 2)], [sympy.Tuple(2, 1)])
    assert align_vectors([column], [sympy.Tuple(1, 2, 3)])[1] == [sympy.Tuple(1, 2, 3)]


def test_the_grader_grades_the_new_forms_in_its_workers():
    with Grader(timeout=5) as g:
        out = g.grade_many([("18.9", "\\$18.90"), ("(-2,-14,-7)", COLUMN_3), ("380", "\\$32,\\!348"),
                            ("32\\,348", "380"), ("(2,1)", COLUMN_12)])
    assert out == [Outcome.CORRECT, Outcome.CORRECT, Outcome.WRONG, Outcome.WRONG, Outcome.WRONG]


@pytest.mark.parametrize(
    "answers",
    [["18.90", "\\$18.9"], ["(-2,-14,-7)", COLUMN_3], ["(-1&0,0&-1)", MINUS_IDENTITY], ["10\\ 000", "10000"]],
)
def test_forms_of_one_value_vote_together(answers):
    assert len(set(AnswerKeys().keys(answers))) == 1


@pytest.mark.parametrize(
    "answers",
    [["(2,1)", COLUMN_12], ["\\$18.90", "18.8"], ["1 000", "0"], ["32\\,348", "380"]],
)
def test_different_values_keep_different_vote_keys(answers):
    assert len(set(AnswerKeys().keys(answers))) == 2
