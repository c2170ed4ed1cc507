"""Tree search: algorithms over an abstract space (:mod:`~tts.search.tree.tree_search`), the
step-wise LLM space they search (:mod:`~tts.search.tree.stepwise`), the strategy wrapper they share
(:mod:`~tts.search.tree.tree_strategy`), a toy space to test them without a model
(:mod:`~tts.search.tree.toy`), and the algorithms themselves."""
