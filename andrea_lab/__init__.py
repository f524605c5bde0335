"""andrea-lab: train ANDREA and compare its variants (norm placement, activation, MLP ratio,
kernel backend), each chosen by name through entry-point plugins."""

from andrea_lab.config import AndreaConfig, ConfigError, preset
from andrea_lab.model import Andrea

__all__ = ["Andrea", "AndreaConfig", "ConfigError", "preset", "AndreaLM", "AndreaDataModule"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lightning is imported lazily so that `import andrea_lab` (e.g. for the model alone or for
    # `andrea plugins`) stays fast.
    if name == "AndreaLM":
        from andrea_lab.module import AndreaLM
        return AndreaLM
    if name == "AndreaDataModule":
        from andrea_lab.data import AndreaDataModule
        return AndreaDataModule
    raise AttributeError(f"module 'andrea_lab' has no attribute {name!r}")
