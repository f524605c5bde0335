"""Kept public path: ``andrea_lab.contracts`` re-exports :mod:`andrea_lab.plugins.contracts`.

Third-party plugins (the example plugin, the package ``andrea new-plugin`` writes, anyone's written
before the plugin system moved into ``andrea_lab/plugins/``) import their base classes from here;
every name is the very object of the new module, so ``isinstance``, subclassing and the registry's
contract checks see no difference. andrea-lab's own code imports the new path
(tests/plugins/test_kept_paths.py holds both to it).
"""

from andrea_lab.plugins.contracts import (BACKEND_OPS, CONTRACT_VERSION, GROUP_CONTRACTS, PLUGIN_KINDS, Activation,
                                          Availability, Contract, KernelBackend, LayerNorm, Norm, NormFactory,
                                          NormPlacement, eager_fallbacks)

__all__ = ["BACKEND_OPS", "CONTRACT_VERSION", "GROUP_CONTRACTS", "PLUGIN_KINDS", "Activation", "Availability",
           "Contract", "KernelBackend", "LayerNorm", "Norm", "NormFactory", "NormPlacement", "eager_fallbacks"]
