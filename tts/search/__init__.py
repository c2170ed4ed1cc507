"""Test-time strategies, by family; each turns problems and a budget into Solutions.

* :mod:`tts.search.base`: the :class:`~tts.search.base.Strategy` contract and the shared
  machinery of strategies that aggregate samples;
* :mod:`tts.search.sampling`: draw whole samples, then aggregate them (self-consistency,
  best-of-N, weighted vote, DeepConf, certainty probing, tool-call voting, universal
  self-consistency for free text);
* :mod:`tts.search.tree`: search over solution steps or answers with a verifier (beam, DVTS,
  REBASE, MCTS, ETS, lookahead, particle filtering and Gibbs, AB-MCTS), with the step-wise space,
  the abstract tree search and a toy space beside them;
* :mod:`tts.search.sequential`: improve one line of work over rounds (revision, budget forcing,
  generative verification).

Collaboration graphs (GenSelect, aggregation, graphs of roles) live in :mod:`tts.graphs`, and the
``auto`` strategy, which chooses among these per problem, in :mod:`tts.budgets.auto_strategy`.
"""
