"""The Triton backend: :mod:`~.backend` (its entry: which formulation a call runs), one launcher per
formulation (:mod:`~.convert`, :mod:`~.rz`, :mod:`~.native`) over what they share (:mod:`~.launch`), their
kernels (``kernels_*``, imported lazily) and :mod:`~.selftest`.

The dispatcher (:mod:`mmaemu.backends`) runs the self-test once per CUDA device before it uses the
kernels there; nothing in this package runs it on its own.
"""
