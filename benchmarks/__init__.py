"""Benchmarks: every way of running an eagle kernel, side by side (``python -m benchmarks --help``).

Not run as tests; ``tests/test_benchmarks_smoke.py`` only checks that the harness runs.
"""
