"""mmaemu's version and distribution name (the one home of both; ``pyproject.toml`` repeats them for
packaging, checked by ``tests/unit/test_distribution.py``).

[Note: the distribution name] The import name is ``mmaemu``, but the distribution is ``mmaemu-bits``:
the name ``mmaemu`` on PyPI belongs to a different project that also installs a top-level ``mmaemu``
package. :data:`FOREIGN_DISTRIBUTION` names it, so that ``import mmaemu`` can say when both are
installed (their files overwrite each other).
"""

__all__ = ["__version__"]

__version__ = "0.2.0.dev0"

#: This project's distribution name (``pip install .`` installs it; ``pip uninstall mmaemu-bits`` removes it).
DISTRIBUTION = "mmaemu-bits"

#: The other distribution that installs an ``mmaemu`` package (PyPI's ``mmaemu``, a different code base).
FOREIGN_DISTRIBUTION = "mmaemu"
