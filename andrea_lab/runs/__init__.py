"""What a fit leaves on disk and the rules for touching it again: the run directory's format and
record, claiming it before the first write, what a resume may change, the one safe checkpoint
reader, and the TensorBoard tags a run's events hold."""
