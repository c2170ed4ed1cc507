import pytest

from tts.answers import extract_answer, normalize_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{4}", "4"),
        ("nested \\boxed{\\sqrt{2}+\\frac{a}{b}} done", "\\sqrt{2}+\\frac{a}{b}"),
        ("3 + 4 = 7. The answer is 7.", "7"),
        ("The answer is 12 apples.", "12"),
        ("Final answer: $x=5$", "x=5"),
        ("Tom had 3, then 5, finally 9", "9"),
        ("It costs 1,250 dollars", "1250"),
        ("no digits at all here", None),
    ],
)
def test_extracts_the_final_answer(text, expected):
    assert extract_answer(text) == expected


def test_cut_off_box_falls_back_to_other_rules():
    # A sample truncated inside \boxed{ must not return half an answer as the box content.
    assert extract_answer("the answer is 6. \\boxed{1") == "6"


@pytest.mark.parametrize(
    "a, b",
    [("7.0", "7"), ("$7$", "7"), ("\\text{(B)}", "(B)"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("1,000", "1000"),
     ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})")],
)
def test_normalisation_equates_surface_variants(a, b):
    assert normalize_answer(a) == normalize_answer(b)
