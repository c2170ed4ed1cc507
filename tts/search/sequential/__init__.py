"""Sequential strategies: one line of work improved over rounds (revision, budget forcing,
generative verification)."""
