"""Import-only stand-in for ``word2number`` (see benchmarks/peers/sal_beam_search.py)."""
