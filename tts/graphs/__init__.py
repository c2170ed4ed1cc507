"""Multi-LLM collaboration graphs: nodes with roles and models, edges that carry outputs forward.

``graph.py`` is the YAML schema and the validated networkx DiGraph, ``roles.py`` what each role
asks and makes, ``executor.py`` runs a graph level by level (one engine call per level per model),
``strategy.py`` makes a graph a :class:`~tts.search.base.Strategy` (registry name ``graph``).
"""
