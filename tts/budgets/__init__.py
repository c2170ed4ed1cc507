"""Allocation: how many samples, and which strategy, each problem gets from a budget.

* difficulty estimates (:mod:`~tts.budgets.difficulty`), accuracy curves and the greedy
  allocator (:mod:`~tts.budgets.allocator`), offline plans from pilot samples
  (:mod:`~tts.budgets.offline_plan`);
* the online rule that stops settled votes (:mod:`~tts.budgets.online`) and escalation of
  contested problems to search (:mod:`~tts.budgets.escalation`);
* across strategies: per-rule curves (:mod:`~tts.budgets.strategy_curves`), the cross-strategy
  allocator (:mod:`~tts.budgets.cross_allocator`) and the ``auto`` strategy
  (:mod:`~tts.budgets.auto_strategy`); model ensembles (:mod:`~tts.budgets.ensemble`);
* :mod:`tts.budgets.replay.prefix`: the same rules replayed on sample pools, honestly (decisions from
  run-time information and other folds only), to compare them with uniform sampling.

What tokens cost is :mod:`tts.cost`'s concern; this package decides how to spend them.
"""
