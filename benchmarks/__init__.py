"""Benchmarks (not part of the test suite); see benchmarks/README.md."""
