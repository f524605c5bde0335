"""One checkpoint, looked inside: the logit lens (what each block's residual stream already predicts),
the attribution trace of one prediction, and the parameter breakdown (``andrea lens``, ``trace``, ``params``)."""
