"""Benchmark harnesses and their command-line entry points (`python -m specjax.bench.<name>`)."""
