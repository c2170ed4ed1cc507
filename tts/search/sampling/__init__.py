"""Sampling strategies: draw whole samples independently, then aggregate them (vote, score, filter)."""
