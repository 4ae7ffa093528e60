"""mmaemu's version (the one home of the number; ``pyproject.toml`` repeats it for packaging, checked by a test)."""

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
