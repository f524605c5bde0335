"""Many runs: :mod:`~andrea_lab.experiments.sweep` runs a suite's variants x learning rates x seeds,
resumably; :mod:`~andrea_lab.experiments.compare` turns the runs into tables, claims with their
intervals, figures and reports (``andrea sweep``, ``andrea compare``)."""
