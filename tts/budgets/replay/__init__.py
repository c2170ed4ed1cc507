"""Allocation replayed on a sample pool: every budget and ordering at once, without an engine.

* :mod:`~tts.budgets.replay.prefix`: orderings, prefix votes and prefix costs (the primitives);
* :mod:`~tts.budgets.replay.online`: the online rule's rounds for every budget of an ordering;
* :mod:`~tts.budgets.replay.matched`: an allocator against a baseline at matched cost, with
  bootstrap intervals (the comparison both replays end with);
* :mod:`~tts.budgets.replay.simulate`: offline and online allocation against uniform sampling at
  matched accuracy (``tts budget simulate``);
* :mod:`~tts.budgets.replay.cross_strategy`: the cross-strategy allocator against the best single
  strategy at matched cost (``tts budget simulate --strategies ...``).

Honesty (docs/architecture.md, "Honest simulation"): a problem's decisions use only what a live run would
know; its ``correct`` field only grades the outcome and fits the curves of *other* folds.
"""
