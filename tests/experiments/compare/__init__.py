"""Tests of andrea_lab.experiments.compare (a package, so that test_trace.py here and in tests/commands/ can
coexist)."""
