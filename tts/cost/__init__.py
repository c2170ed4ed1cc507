"""The cost model: what a strategy's tokens cost on a named GPU, after Kinetics (Sadhukhan et al. 2025).

* :mod:`~tts.cost.architecture`: a model's shape (layers, heads, KV heads, parameters) from its
  ``config.json`` or the bundled tables in ``data/``;
* :mod:`~tts.cost.hardware`: GPU specs (peak FLOP/s, memory bandwidth, the FLOPs-per-byte ridge);
* :mod:`~tts.cost.cost_model`: FLOPs, bytes moved, eFLOPs and roofline seconds of a :class:`~tts.types.Usage`;
* :mod:`~tts.cost.prices`: dollars per token or per GPU-hour;
* :mod:`~tts.cost.ledger`: the running account of a run's usage and cost;
* :mod:`~tts.cost.calibration`: the cost model checked against a real engine's timings.

It sits below every strategy and allocator (it imports only :mod:`tts.types` and :mod:`tts.paths`),
so anything that spends tokens can price them.
"""
