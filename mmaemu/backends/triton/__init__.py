"""The Triton backend: :mod:`~.backend` (launcher), :mod:`~.kernels` (the kernel) and :mod:`~.selftest`.

The dispatcher (:mod:`mmaemu.backends`) runs the self-test once per CUDA device before it uses the
kernels there; nothing in this package runs it on its own.
"""
