"""Import-only stand-in for ``latex2sympy2`` (see benchmarks/peers/sal_beam_search.py).

search-and-learn's ``sal.utils.math`` imports it for grading answers, which its beam search never
does; the real package pins an antlr4 runtime that would clash with tts's grader.
"""


def latex2sympy(*args, **kwargs):
    raise RuntimeError("latex2sympy2 is a stand-in here: search-and-learn's answer grading is not used by "
                       "benchmarks/side_by_side.py (tts's grader grades every side)")
