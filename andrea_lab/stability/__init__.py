"""The stability interventions that are options rather than plugin kinds (soft-capping, z-loss)
and the probe's statistics that show what they do (docs/stability.md). The norms and QK-norm are
plugins and model options: andrea_lab.plugins.builtin, andrea_lab.model."""
