"""Recordings of a reference platform: the format, the recorder, the replay, and profiles built from them.

- :mod:`~mmaemu.recording.format`: the directory format (manifest, sections, call records), read and written;
- :mod:`~mmaemu.recording.inputs`: live-call inputs regenerated from a seed;
- :mod:`~mmaemu.recording.probes`: the numerics probes and their analysis (which preset fits);
- :mod:`~mmaemu.recording._envelope`: the split-K envelope, fitted and tested on held-out rows;
- :mod:`~mmaemu.recording.profile`: a :class:`~mmaemu.platforms.profiles.Profile` from a recording;
- :mod:`~mmaemu.recording.record`: ``python -m mmaemu record`` (on a CUDA machine);
- :mod:`~mmaemu.recording.replay`: ``python -m mmaemu replay`` (anywhere).
"""

from __future__ import annotations

from .format import Recording
from .profile import profile_from_recording, register_recording

# ``record`` and ``replay`` are submodules here (their functions: ``record.record``, ``replay.replay``);
# re-exporting the functions under the same names would hide the modules.
__all__ = ["Recording", "profile_from_recording", "register_recording"]
