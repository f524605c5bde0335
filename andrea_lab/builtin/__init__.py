"""Kept public path: ``andrea_lab.builtin`` holds only :mod:`andrea_lab.builtin.backends`, the reference
backend third-party tests compare against. The built-in plugins live in :mod:`andrea_lab.plugins.builtin`."""
