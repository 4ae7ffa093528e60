"""Recordings of a reference platform: the format, the recorder, the replay, and profiles built from them.

The public names are this package's ``__all__``: :class:`Recording` and :func:`inspect` (the one strict reader),
:func:`record` (``python -m mmaemu record``, on a CUDA machine), :func:`replay` and :class:`ReplayReport`
(``python -m mmaemu replay``, anywhere), :func:`profile_from_recording` and :func:`register_recording`. Its
modules are internal:

- :mod:`~mmaemu.recording._format`: the directory format (manifest, sections, call records), read and written;
- :mod:`~mmaemu.recording._inputs`: live-call inputs regenerated from a seed;
- :mod:`~mmaemu.recording._probes`: the numerics probes and their analysis (which preset fits);
- :mod:`~mmaemu.recording._envelope`: the split-K envelope, fitted and tested on held-out rows;
- :mod:`~mmaemu.recording._profile`: a :class:`~mmaemu.platforms.Profile` from a recording;
- :mod:`~mmaemu.recording._record`: ``python -m mmaemu record`` (on a CUDA machine);
- :mod:`~mmaemu.recording._replay`: ``python -m mmaemu replay`` (anywhere).
"""

from __future__ import annotations

from ._format import Recording, inspect
from ._profile import profile_from_recording, register_recording
from ._record import record
from ._replay import ReplayReport, replay

__all__ = ["Recording", "inspect", "record", "replay", "ReplayReport", "profile_from_recording", "register_recording"]
