"""The wall-clock budget of a recording and its progress bar.

The sections of a recording share one budget; a section that runs out stops, writes what it has and is
marked ``partial``; the progress bar (on stderr) says how far each section got.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from ._records import Section

__all__ = ["Budget"]


class Budget:
    """A wall-clock budget shared by the sections, with a progress bar on stderr.

    Section ``i`` may run until ``start + share_i * total`` (cumulative shares), or until the total runs
    out when earlier sections finished early.
    """

    SHARES = {Section.HEURISTICS: 0.55, Section.PROBES: 0.70, Section.CALLS: 1.0}

    def __init__(self, minutes: float, *, stream: TextIO | None = None, clock: Any = time.monotonic) -> None:
        """Start the clock; ``stream`` None: no progress bar."""
        self.seconds = float(minutes) * 60.0
        self._clock = clock
        self.start = clock()
        self.stream = stream
        self._section: Section | None = None
        self._deadline = self.start + self.seconds
        self._last_draw = 0.0
        self.stopped: list[str] = []

    def begin(self, section: Section) -> None:
        """Enter a section (sets its deadline)."""
        self._section = section
        share = self.SHARES.get(section, 1.0)
        self._deadline = self.start + share * self.seconds

    def elapsed(self) -> float:
        """Seconds since the start."""
        return float(self._clock() - self.start)

    def expired(self) -> bool:
        """Whether the current section's time is up."""
        return bool(self._clock() >= self._deadline)

    def stop(self, reason: str) -> None:
        """Note that a section stopped early."""
        self.stopped.append(reason)

    def progress(self, done: int, total: int, force: bool = False) -> None:
        """Draw the bar (at most five times a second)."""
        if self.stream is None:
            return
        now = self._clock()
        if not force and now - self._last_draw < 0.2:
            return
        self._last_draw = now
        frac = done / total if total else 1.0
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        left = max(0.0, self._deadline - now)
        name = self._section.value if self._section else ""
        self.stream.write(f"\r{name:11s} [{bar}] {done:>9,}/{total:<9,} {int(left) // 60:3d}:{int(left) % 60:02d} left ")
        if force:
            self.stream.write("\n")
        self.stream.flush()

    def describe(self) -> dict[str, Any]:
        """The budget as JSON."""
        return {"minutes": self.seconds / 60.0, "elapsed_s": round(self.elapsed(), 3), "stopped": list(self.stopped)}
