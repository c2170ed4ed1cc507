"""Benchmarks: datasets, answer extraction and grading, the eval runner, sample pools."""
