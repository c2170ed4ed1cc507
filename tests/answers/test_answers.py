import threading
import time

import pytest

from tts.answers import AnswerKeys, answer_keys, extract_answer, normalize_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{4}", "4"),
        ("nested \\boxed{\\sqrt{2}+\\frac{a}{b}} done", "\\sqrt{2}+\\frac{a}{b}"),
        ("3 + 4 = 7. The answer is 7.", "7"),
        ("The answer is 12 apples.", "12"),
        ("The answer is 7 apples", "7"),
        ("Final answer: $x=5$", "x=5"),
        ("Tom had 3, then 5, finally 9", "9"),
        ("It costs 1,250 dollars", "1250"),
        ("The answer is (C).", "(C)"),
        ("no digits at all here", None),
        ("", None),
    ],
)
def test_extracts_the_final_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        # The last number of the text would cut each of these apart (3, 01, 3, 9, 000).
        ("Adding the cases, the probability is $\\frac{1}{3}$.", "\\frac{1}{3}"),
        ("So the solution set is $x \\in [0,1)$", "[0,1)"),
        ("Taking the positive root, the side length is $\\sqrt{3}$", "\\sqrt{3}"),
        ("Solving for k gives k = \\frac{10}{9}", "\\frac{10}{9}"),
        ("Altogether the farm sells 1 000 apples", "1000"),
        ("The answer is 1 000 apples.", "1000"),
        # A check written after the stated answer does not replace it.
        ("the answer is $\\frac{1}{3}$. Checking: 2 + 2 = 4.", "\\frac{1}{3}"),
        # A chain of equalities states its last member; a computation states its value.
        ("so $f(2) = 4 + 1 = 5$.", "5"),
        ("Putting the cases together gives $96+48 = 144$ seatings.", "144"),
        # Math that only names a variable after the answer is prose, not the answer.
        ("Thus there are $2$ different values of $x$ that work.", "2"),
        ("Because $x$ cannot be $0$, $x=5$.", "5"),
    ],
)
def test_reads_latex_and_numbers_as_a_mathematician_would(text, expected):
    assert extract_answer(text) == expected


def test_boxed_answers_are_read_without_their_surface_variants():
    assert extract_answer("so \\boxed{\\dfrac{1}{2}}") == "\\frac{1}{2}"
    assert extract_answer("the length is \\boxed{5\\text{ cm}}") == "5"


def test_an_answer_with_several_numbers_is_not_cut_to_the_last():
    assert extract_answer("The answer is x = 5 and y = 3.") == "x = 5 and y = 3"


def test_cut_off_box_falls_back_to_other_rules():
    # A sample truncated inside \boxed{ must not return half an answer as the box content.
    assert extract_answer("the answer is 6. \\boxed{1") == "6"


@pytest.mark.parametrize(
    "text",
    [
        "$\\binom{1000000}{500000}$",  # the LaTeX parser would compute this binomial
        "We get $\\lfloor 10^{10^{10}} \\rfloor$.",  # ... and this floor
        "$" + "(" * 3000 + "1" + ")" * 3000 + "$",  # ... and recurse for minutes on this
        "answer " * 5000,
        "x" * 200_000 + " so 42",
    ],
)
def test_pathological_outputs_return_quickly(text):
    start = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - start < 5


def test_extraction_works_outside_the_main_thread():
    # math-verify's own timeouts use signals, which raise outside the main thread.
    out: list[str | None] = []
    worker = threading.Thread(target=lambda: out.append(extract_answer("thus $\\frac{2}{7}$ of them")))
    worker.start()
    worker.join()
    assert out == ["\\frac{2}{7}"]


@pytest.mark.parametrize(
    "a, b",
    [("7.0", "7"), ("$7$", "7"), ("\\text{(B)}", "(B)"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("1,000", "1000"),
     ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
     ("\\textbf{(B)}", "(B)"), ("\\mathbf{5}", "5"), ("5 \\mathrm{cm}", "5cm"), ("1\\,000", "1000"),
     ("x \\! + \\! 1", "x+1"), ("\\tfrac{1}{2}", "\\frac{1}{2}"), ("42.", "42"), ("\\$5", "5")],
)
def test_normalisation_equates_surface_variants(a, b):
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize("a, b", [(".5", "5"), ("2X", "2"), ("\\frac{1}{2}", "frac12"), ("5.5", "55"),
                                  ("-7", "7"), ("1,000", "1,00"), ("7.5", "7")])
def test_normalisation_keeps_different_answers_apart(a, b):
    assert normalize_answer(a) != normalize_answer(b)


def test_equal_answers_share_one_vote_key():
    keys = AnswerKeys().keys(["0.5", "\\frac{1}{2}", "\\dfrac12", "1/2", "2", "3"])
    assert keys == ["0.5", "0.5", "0.5", "0.5", "2", "3"]


def test_vote_keys_keep_none_and_order():
    keys = AnswerKeys().keys([None, "1,000", "999", None, "1000"])
    assert keys == [None, "1000", "999", None, "1000"]


@pytest.mark.parametrize(
    "answers",
    [["x \\in [0,1)", "[0,1)"], ["5", "x=5"], ["(C)", "C", "\\text{(C)}"], ["5\\text{ cm}", "5"]],
)
def test_surface_forms_of_one_answer_vote_together(answers):
    keys = AnswerKeys().keys(answers)
    assert len(set(keys)) == 1, keys


@pytest.mark.parametrize(
    "answers",
    [["[0,1)", "[0,1]"], ["\\text{no}", "\\text{on}"], ["no", "on"], ["\\sqrt{3}", "3"]],
)
def test_different_answers_keep_different_keys(answers):
    assert len(set(AnswerKeys().keys(answers))) == len(answers)


@pytest.mark.parametrize(
    "answers, keys",
    [(["-3", "3", "3"], ["-3", "3", "3"]),
     (["-\\frac{1}{2}", "\\frac{1}{2}", "-0.5", "0.5", "-1/2", "1/2"],
      ["-\\frac{1}{2}", "\\frac{1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}"]),
     (["-2.5", "2.5", "-\\frac{5}{2}", "\\frac{5}{2}"], ["-2.5", "2.5", "-2.5", "2.5"]),
     (["50\\%", "-50\\%", "50%"], ["50\\%", "-50\\%", "50\\%"]),
     (["5\\text{ cm}", "-5\\text{ cm}", "5 cm"], ["5cm", "-5cm", "5cm"]),
     (["\\$3", "-\\$3", "3"], ["3", "-3", "3"])],
)
def test_opposite_signs_keep_apart_and_equal_values_merge(answers, keys):
    """Signed integers, fractions, decimals, percentages, units and currency: a value and its
    negative never share a key (a dropped sign would count "-3" as a vote for 3)."""
    assert AnswerKeys().keys(answers) == keys


def test_the_key_is_the_first_seen_answer_and_does_not_depend_on_the_call():
    keys = AnswerKeys()
    assert keys.keys(["\\frac{1}{2}", "0.5"]) == ["\\frac{1}{2}", "\\frac{1}{2}"]
    assert keys.keys(["0.5", "\\frac{1}{2}"]) == ["0.5", "0.5"]
    assert answer_keys(["2", "2.0", "\\frac{4}{2}"]) == ["2", "2", "2"]


def test_answers_that_would_take_unbounded_time_to_compare_keep_their_own_key():
    start = time.perf_counter()
    keys = AnswerKeys().keys(["10^{10^{10}}", "(1/3)^{99999999}", "100000000!", "2", "0"])
    assert time.perf_counter() - start < 5
    assert len(set(keys)) == 5


def test_comparisons_are_capped_per_call():
    keys = AnswerKeys(max_pairs=0).keys(["0.5", "\\frac{1}{2}"])
    assert keys == ["0.5", "\\frac{1}{2}"]


def test_vote_keys_work_outside_the_main_thread():
    out: list[list[str | None]] = []
    worker = threading.Thread(target=lambda: out.append(AnswerKeys().keys(["0.25", "\\frac{1}{4}"])))
    worker.start()
    worker.join()
    assert out == [["0.25", "0.25"]]


@pytest.mark.parametrize(
    "text, expected",
    [
        # Boxes with only joiners between them are one answer in parts: a set, as math-verify reads them.
        ("so the pairs are $\\boxed{(1, 3)} \\quad \\text{and} \\quad \\boxed{(4, 0)}$", "(1, 3),(4, 0)"),
        ("the roots are \\boxed{2}, \\boxed{5}.", "2,5"),
        ("\\boxed{a = 1} and \\boxed{b = 7}", "a = 1,b = 7"),
        ("it is \\boxed{6}, or written out, \\boxed{6}", "6"),  # words between boxes: the last box
        ("\\boxed{6} and \\boxed{6}", "6"),  # the same box twice states it once
        ("so $\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$.", "\\frac{639}{40}"),  # "or": one answer twice
        # A whole output that is one formula naming a constant is that answer, not prose.
        ("$E$", "E"),
        ("$e$", "e"),
    ],
)
def test_boxes_in_parts_and_lone_formulas(text, expected):
    assert extract_answer(text) == expected


def test_boxes_in_parts_grade_against_the_whole_answer():
    from tts.answers.equivalence import AnswerKeys

    keys = AnswerKeys().keys([extract_answer("\\boxed{(4, 0)} and \\boxed{(1, 3)}"), "(1, 3), (4, 0)"])
    assert keys[0] == keys[1]


def test_only_small_bounded_expressions_are_compared():
    """The guard that keeps math-verify's unbounded comparisons out of voting (``_tame``): small
    matrices of small entries, expressions up to ``max_nodes`` nodes, integers up to 4000 bits and
    powers up to 1000 pass; sums, integrals, factorials, towers and anything bigger do not."""
    import sympy

    from tts.answers.equivalence import _tame

    x, y = sympy.symbols("x y")
    assert _tame(sympy.zeros(8, 8)) and not _tame(sympy.zeros(8, 9)) and not _tame(sympy.zeros(5, 13))
    assert not _tame(sympy.Matrix([[1, x**2000]]))
    entry = x + y + 1  # 4 nodes: Add, 1, x, y
    assert _tame(sympy.Matrix([[entry]]), max_nodes=4) and not _tame(sympy.Matrix([[entry]]), max_nodes=3)
    assert _tame(entry, max_nodes=4) and not _tame(entry, max_nodes=3)
    assert _tame(sympy.Integer(2**4000 - 1)) and not _tame(sympy.Integer(2**4000))
    assert _tame(x**1000) and not _tame(x**1001) and not _tame(x**-1001) and not _tame(x ** (y**2))
    unbounded = [sympy.Sum(x, (x, 1, y)), sympy.Integral(x, x), sympy.factorial(x), sympy.binomial(x, y),
                 sympy.gamma(x), sympy.Product(x, (x, 1, y)), sympy.Limit(x, x, 0), sympy.Derivative(x**2, x)]
    assert not any(_tame(v) for v in unbounded)
    assert not _tame(5) and not _tame("5")  # not a sympy value
