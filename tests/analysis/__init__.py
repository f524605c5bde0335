"""Tests of andrea_lab.analysis (a package, so that test_trace.py here and in tests/commands/ can coexist)."""
