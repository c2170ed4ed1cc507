"""Rate models for the online allocator's ``rate`` rule (``OnlinePolicy(rule="rate", rate_model=...)``):
per vote, a prediction of the accuracy one more sample buys.

Two are here, ``VoteValue`` (rule ``gain``) and ``ContestedRule`` (rule ``contested``). Both were
measured against the default rules on the hard end of the sample pools and did not beat them
(docs/stopping_rules_that_lost.md has the measurements); they stay as opt-in rate models so the
measurement can be re-run (``benchmarks/online_hard_end.py``) and the ideas picked up again.
"""
