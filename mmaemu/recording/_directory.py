"""The file operations of a recording directory, for a directory that may be hostile.

A recording is made to be copied between machines, so whoever reads one must assume that anything
may lie in it: symbolic links to files elsewhere, FIFOs that block a reader, devices, files of
terabytes. :class:`RecordingDirectory` is the only way the recorder, the replay and
:func:`~mmaemu.recording.profile_from_recording` touch a recording's files, and it keeps
three promises:

- **no name leaves the directory**: a name is one plain path component (letters, digits, ``.``,
  ``_`` and ``-``, not starting with ``.`` unless it is one of our own temporary names); ``/``,
  ``..`` and absolute paths are refused;
- **no link is followed and nothing but a regular file is opened**: every entry of the directory
  must be a regular file (:meth:`RecordingDirectory.check_entries` names the first that is not);
  files are opened relative to a descriptor of the directory with ``O_NOFOLLOW`` and
  ``O_NONBLOCK`` (a FIFO never blocks) and checked with ``fstat`` after opening, so an entry
  swapped for a link in between is refused too;
- **no write goes through an existing entry**: a file is written as a new temporary file
  (``O_CREAT | O_EXCL``, a random name) and renamed over its target; a rename replaces the
  entry itself, never what a link there points to.

Every refusal is a :class:`~mmaemu.errors.RecordingDamagedError` that names the entry.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO

from ..errors import RecordingDamagedError

__all__ = ["MAX_FILE_BYTES", "RecordingDirectory"]

#: The largest data file a recording may hold (a full grid's table is about 100 MB).
MAX_FILE_BYTES = 1 << 30

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_TEMPORARY = re.compile(r"\.[A-Za-z0-9._-]{1,160}\.tmp")
_FLAGS_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_FLAGS_NEW = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_BINARY", 0))
#: Relative opens through a directory descriptor (Linux, macOS, the BSDs); elsewhere paths and lstat.
_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")


def _kind(mode: int) -> str:
    """What a non-regular entry is, in words."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


class RecordingDirectory:
    """A recording directory, opened once; every file operation of a recording goes through it.

    The directory itself is the one path the caller chose (it may be reached through a link); what lies
    inside it is untrusted. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False) -> None:
        """Open ``root`` (creating it, and its parents, when ``create``).

        Raises:
            RecordingDamagedError: ``root`` is missing or not a directory.
        """
        self.root = Path(root)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        if not self.root.exists():
            raise RecordingDamagedError(f"{self.root} does not exist")
        if not self.root.is_dir():
            raise RecordingDamagedError(f"{self.root} is not a directory: a recording is a directory with a manifest.json")
        self._fd: int | None = None
        if _DIR_FD:
            try:
                self._fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise RecordingDamagedError(f"{self.root}: cannot open the recording ({exc.strerror or exc})") from None

    def __enter__(self) -> RecordingDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the directory's descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- names and entries ------------------------------------------------------------------------------

    def _name(self, name: str, *, temporary: bool = False) -> str:
        if not isinstance(name, str) or not (_NAME.fullmatch(name) or (temporary and _TEMPORARY.fullmatch(name))):
            raise RecordingDamagedError(f"{self.root}: {name!r} is not a plain file name inside the recording "
                                        "(no '/', '..', absolute paths or hidden names)")
        return name

    def _lstat(self, name: str) -> os.stat_result | None:
        try:
            if self._fd is not None:
                return os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            return os.lstat(self.root / name)
        except FileNotFoundError:
            return None

    def entries(self) -> dict[str, str]:
        """Every entry of the directory: name -> ``"file"`` or what else it is (``"a symbolic link"`` ...)."""
        found: dict[str, str] = {}
        with os.scandir(self._fd if self._fd is not None else self.root) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                found[entry.name] = "file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        return found

    def check_entries(self) -> None:
        """Refuse a directory holding anything but regular files (links, directories, FIFOs, devices, sockets).

        Raises:
            RecordingDamagedError: naming the first such entry.
        """
        for name, kind in sorted(self.entries().items()):
            if kind != "file":
                raise RecordingDamagedError(
                    f"{self.root / name} is {kind}: a recording holds regular files only, and mmaemu never follows "
                    "a link or opens a special file in one; remove it, or copy the recording again from the machine "
                    "that recorded it")

    def exists(self, name: str) -> bool:
        """Whether an entry of that name exists (of any kind; nothing is followed)."""
        return self._lstat(self._name(name)) is not None

    # -- reading --------------------------------------------------------------------------------------

    def read(self, name: str, *, limit: int = MAX_FILE_BYTES) -> bytes | None:
        """The bytes of a regular file, or None when there is no such entry.

        Raises:
            RecordingDamagedError: the entry is a link or not a regular file, it is larger than ``limit``
                bytes, or it cannot be read.
        """
        self._name(name)
        path = self.root / name
        try:
            before = self._lstat(name)
            if before is None:
                return None
            if not stat.S_ISREG(before.st_mode):  # refused before it is opened: opening a device may act
                raise RecordingDamagedError(f"{path} is {_kind(before.st_mode)}: a recording holds regular files "
                                            "only, and mmaemu never follows a link or opens a special file in one")
            if self._fd is not None:
                fd = os.open(name, _FLAGS_READ, dir_fd=self._fd)
            else:
                fd = os.open(path, _FLAGS_READ | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: swapped for a link after the check
            raise RecordingDamagedError(f"{path} cannot be read ({exc.strerror or exc})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
                raise RecordingDamagedError(f"{path} changed while it was opened: a recording holds regular files only")
            if st.st_size > limit:
                raise RecordingDamagedError(f"{path} has {st.st_size:,} bytes, more than a recording's file may hold "
                                            f"({limit:,})")
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise RecordingDamagedError(f"{path} grew past {limit:,} bytes while it was read")
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise RecordingDamagedError(f"{path} cannot be read ({exc.strerror or exc})") from None
        finally:
            os.close(fd)

    # -- writing --------------------------------------------------------------------------------------

    def _new(self, name: str) -> int:
        """A new file of that (temporary) name, created exclusively: an existing entry is never opened."""
        if self._fd is not None:
            return os.open(name, _FLAGS_NEW, 0o644, dir_fd=self._fd)
        return os.open(self.root / name, _FLAGS_NEW, 0o644)

    def _rename(self, src: str, dst: str) -> None:
        if self._fd is not None:
            os.replace(src, dst, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        else:
            os.replace(self.root / src, self.root / dst)

    def unlink(self, name: str) -> None:
        """Remove an entry if it exists (a link is removed, not what it points to)."""
        try:
            if self._fd is not None:
                os.unlink(self._name(name, temporary=True), dir_fd=self._fd)
            else:
                os.unlink(self.root / self._name(name, temporary=True))
        except FileNotFoundError:
            pass

    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` whole or not at all: a new temporary file, renamed over the entry.

        Raises:
            OSError: the file cannot be written (the directory is unchanged then).
            RecordingDamagedError: ``name`` is not a plain file name, or a directory stands in its place.
        """
        self._name(name)
        st = self._lstat(name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise RecordingDamagedError(f"{self.root / name} is a directory: a recording holds regular files only")
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = self._new(tmp)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            self._rename(tmp, name)
        finally:
            self.unlink(tmp)

    def create(self, name: str) -> IO[str]:
        """A new text file opened for writing; the name must not exist yet (links included).

        Raises:
            FileExistsError: an entry of that name exists.
        """
        fd = self._new(self._name(name))
        return os.fdopen(fd, "w", encoding="utf-8")
