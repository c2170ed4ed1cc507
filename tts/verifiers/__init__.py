"""Verifiers: score whole solutions or single steps, batched, with the Usage they spent."""
