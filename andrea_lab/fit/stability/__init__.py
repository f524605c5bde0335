"""A run's stability, measured while it trains: the :class:`~andrea_lab.fit.stability.monitor.StabilityMonitor`
callback, the probe's statistics it logs (:mod:`~andrea_lab.fit.stability.probe`, one function per tag),
the loss-spike and divergence detectors (:mod:`~andrea_lab.fit.stability.events`), the unigram level a stuck
run sits on, and the TensorBoard layout of the curves (docs/stability.md). A new per-step metric is a function
in ``probe``; the interventions themselves are model options (andrea_lab.model.softcap, QK-norm) or a loss
term (andrea_lab.fit.z_loss)."""
