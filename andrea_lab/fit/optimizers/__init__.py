"""The built-in optimizer plugins (entry-point group ``andrea_lab.optimizer``), one module each.

The contract they implement is :class:`andrea_lab.model.training_contracts.Optimizer`; which parameter each
of their update rules takes is decided in :mod:`andrea_lab.model.param_groups`. The optimizer math is the
kept libraries' (torch's AdamW and Muon, ``lion-pytorch``, ``schedulefree``), imported lazily
(:mod:`.extras`) so that the optional ones cost nothing unless selected.
"""
