"""The built-in plugins. They are registered in andrea-lab's own ``pyproject.toml`` under the same
entry-point groups a third-party package uses; nothing here is looked up by name in code."""
