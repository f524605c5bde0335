"""Comparing runs: the runs table, paired statistics and the project's error rule, claims and their
verdicts, the A/A calibration, reports, figures and the TensorBoard text (``andrea compare``)."""
