"""Import-only stand-in for ``word2number.w2n``: search-and-learn's answer parser imports it; its
beam search never calls it."""


def word_to_num(*args, **kwargs):
    raise RuntimeError("word2number is a stand-in here: search-and-learn's answer parsing is not used by "
                       "benchmarks/side_by_side.py")
