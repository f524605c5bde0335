"""Kept public path: ``andrea_lab.registry`` re-exports :mod:`andrea_lab.plugins.registry`.

Plugin packages' tests call ``resolve``, ``list_plugins`` and ``clear_cache`` and catch ``PluginError``
through this path; each name here is the new module's own object (the same function, the same cache,
the same exception classes). Patching a name *here* does not patch the registry: patch
``andrea_lab.plugins.registry``. andrea-lab's own code imports the new path.
"""

from andrea_lab.plugins.registry import (BACKEND_OPS, CONTRACT_VERSION, GROUP_CONTRACTS, IMPORT_PATHS_ENV_VAR, KINDS,
                                         PLUGIN_KINDS, STRICT_ENV_VAR, Availability, BackendUnavailableError,
                                         PluginError, PluginInfo, PluginRuntimeError, UnregisteredPluginError,
                                         UsageError, allow_import_paths, check_availability, clear_cache,
                                         describe_selection, eager_fallbacks, group_name, import_paths_allowed,
                                         list_plugins, registered_names, require_registered, resolve, same_plugin,
                                         selected_entry_point, strict_mode, suggest,
                                         with_article)

__all__ = ["BACKEND_OPS", "CONTRACT_VERSION", "GROUP_CONTRACTS", "IMPORT_PATHS_ENV_VAR", "KINDS", "PLUGIN_KINDS",
           "STRICT_ENV_VAR", "Availability", "BackendUnavailableError", "PluginError", "PluginInfo",
           "PluginRuntimeError", "UnregisteredPluginError", "UsageError", "allow_import_paths", "check_availability",
           "clear_cache", "describe_selection", "eager_fallbacks", "group_name", "import_paths_allowed",
           "list_plugins", "registered_names", "require_registered", "resolve", "same_plugin",
           "selected_entry_point", "strict_mode", "suggest", "with_article"]
