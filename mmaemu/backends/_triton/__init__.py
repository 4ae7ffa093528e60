"""The Triton backend: :mod:`~._executor` (its executor: the entry behind the self-test), :mod:`~.backend`
(its entry: which formulation a call runs), one launcher per formulation (:mod:`~._convert`, :mod:`~._rz`,
:mod:`~._native`) over what they share (:mod:`~._launch`), their kernels (``_kernels_*``, imported lazily)
and :mod:`~._selftest`.

The dispatcher (:mod:`mmaemu.backends`) asks the executor's self-test, which runs once per CUDA device,
before it uses the kernels there; nothing in this package runs it on its own.
"""
