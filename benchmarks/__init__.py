"""Reproducible benchmarks: each script starts the sandbox itself and compares against a baseline in the same run."""
