"""Reading models and runs: parameter breakdowns, run comparison."""
