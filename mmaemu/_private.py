"""Folders and files of one user that mmaemu reads back, trusted only when no other user can have written them.

mmaemu reads two kinds of per-user files from its cache folder (:func:`mmaemu._host.user_cache_dir`): numba's
machine code for the cpu backend, whose index numba unpickles (running whatever code a planted file names), and
the replay key, whose secrecy is what attests a replay report. Each is only as safe as the folders that lead to
it, so every reader goes through this module:

- :func:`private_dir`: a folder, made where missing (mode 0700), resolved, once every folder on its way is safe;
- :func:`check_private_entries`: every entry of such a folder (numba's files);
- :func:`read_private_file` / :func:`create_private_file`: one small file of it (the replay key).

Each raises :class:`~mmaemu.errors.UntrustedCacheError` naming the folder or file at fault, its owner and mode,
and how to fix it.

[Note: what makes a folder or file private] Another local user can put content at a path when they can write
to, or own, any folder on the way to it (writing a folder lets them rename an entry away and put their own in its
place; owning one lets them chmod it first), or write the file itself. So the whole chain from the filesystem's
root is checked, on the path resolved once (``os.path.realpath``), and the resolved path is what the caller then
uses: a symbolic link changed later leads nowhere new. For the folders above the private root (the folder a
setting names: ``MMAEMU_CACHE_DIR``, ``NUMBA_CACHE_DIR``), an owner that is this user or root, and no group or
other write unless the folder is sticky (``/tmp``, mode 1777, where only an entry's owner can rename or delete
it). For the private root and everything under it, this user as owner and no group or other write at all (a
sticky folder still lets others create files in it). For files, ``lstat`` (or ``O_NOFOLLOW`` and ``fstat``): a
regular file, this user's, with one name (a second hard link made earlier writes the same file from elsewhere),
not writable by others; a secret (the key) not readable or writable by group or others. A group-writable
file inside a folder closed to group and others (mode 0700, as mmaemu makes them) is accepted: nobody else can
reach it there, and numba writes its files with the umask's mode (0664 under the user-private-group umask
002). Group write through this user's own private group is no one else's write ([Note: user private
groups]), unless a POSIX ACL makes the group bits its mask (:func:`_plain_mode`). The checks hold against
other users, not against root.

[Note: races] Once a chain passes, no other user can change it (only an owner can chmod a folder, only root can
chown), so what is read later is what was checked; folders are made top-down, each after its parent passed, so
none is made inside a folder others can write. The key is checked on the descriptor it is read from (``fstat``);
numba opens its files by name later, which is safe because nobody else can replace an entry of a folder that
passed.

[Note: Windows] Without ``os.geteuid`` (Windows), owners and modes are not checked (access there is ACLs, and
``%LOCALAPPDATA%`` is per-user); links, non-folders and non-regular files still are.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from pathlib import Path

from .errors import UntrustedCacheError

__all__ = ["check_private_entries", "create_private_file", "private_dir", "read_private_file"]

_WRITE_GO = stat.S_IWGRP | stat.S_IWOTH
_ACCESS_GO = 0o077
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _euid() -> int | None:
    """This process's effective uid; None where the platform has none (Windows: nothing is owner-checked)."""
    geteuid = getattr(os, "geteuid", None)
    return None if geteuid is None else int(geteuid())


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


@functools.lru_cache(maxsize=None)
def _private_group(gid: int) -> bool:
    """Whether group ``gid`` is this user's private group: no other user can act through it.

    [Note: user private groups] Many systems (Debian, Ubuntu, Fedora) give each user a group of their own,
    named after them, and a umask of 002, so folders that users make themselves (``~/.cache``) are
    group-writable. Group write on such a folder gives nobody else access. The group counts as private when
    it is this user's primary group, bears this user's name, lists no other member, and is no other
    user's primary group (as far as the user database can be enumerated: a directory service that hides
    its users can hide one more member). Any other group-writable folder is refused.
    """
    euid = _euid()
    if euid is None:
        return False
    try:
        import grp
        import pwd

        user = pwd.getpwuid(euid)
        group = grp.getgrgid(gid)
        if gid != user.pw_gid or group.gr_name != user.pw_name or set(group.gr_mem) - {user.pw_name}:
            return False
        return all(other.pw_gid != gid or other.pw_uid == euid for other in pwd.getpwall())
    except (ImportError, KeyError, OSError):
        return False


_ACL_XATTR = "system.posix_acl_access"


def _plain_mode(path: Path) -> bool:
    """Whether ``path``'s group permission bits are its owning group's: it has no extended access ACL.

    With a POSIX ACL the mode's group bits are the ACL's mask, the most any named user or group entry grants,
    so g+w may be another user's write. Linux keeps an extended ACL in the ``system.posix_acl_access``
    attribute; where it cannot be read (no ``os.getxattr``: macOS, whose ACLs the mode does not show either;
    an error other than "no such attribute" or "not supported") the bits are not taken as the group's.
    """
    getxattr = getattr(os, "getxattr", None)
    if getxattr is None:
        return False
    try:
        getxattr(path, _ACL_XATTR, follow_symlinks=False)
    except OSError as exc:
        return exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)
    return False


def _group_write_only_by_me(path: Path, st: os.stat_result) -> bool:
    """Whether the only write ``path`` (``st``) grants beyond its owner is to this user's private group."""
    return not st.st_mode & stat.S_IWOTH and _private_group(st.st_gid) and _plain_mode(path)


def _untrusted(path: Path, st: os.stat_result, problem: str, fix: str) -> UntrustedCacheError:
    return UntrustedCacheError(
        f"{path} {problem} (owner {_owner(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}), so another user "
        f"could have written what mmaemu would read from it: {fix}")


def _folder_problem(path: Path, st: os.stat_result, private: bool, setting: str) -> UntrustedCacheError | None:
    """Why the folder ``path`` (lstat ``st``) is not safe, or None. ``private``: at or under the private root."""
    elsewhere = f"set {setting} to a folder of your own that only you can write"
    if stat.S_ISLNK(st.st_mode):
        return _untrusted(path, st, "became a symbolic link while it was checked", elsewhere)
    if not stat.S_ISDIR(st.st_mode):
        return _untrusted(path, st, "is not a folder", f"remove it, or {elsewhere}")
    euid = _euid()
    if euid is None:
        return None
    if st.st_uid != euid and (private or st.st_uid != 0):
        return _untrusted(path, st, "belongs to another user", elsewhere)
    if st.st_mode & _WRITE_GO and (private or not st.st_mode & stat.S_ISVTX) and not _group_write_only_by_me(path, st):
        who = "others" if st.st_mode & stat.S_IWOTH else "its group"
        return _untrusted(path, st, f"is writable by {who}",
                          f"run `chmod go-w '{path}'` and remove what others may have put under it (mmaemu makes "
                          f"its files again), or {elsewhere}")
    return None


def private_dir(path: Path, *, root: Path, setting: str, create: bool) -> Path:
    """The folder ``path`` resolved (symbolic links followed once), made where missing, once it is private.

    Args:
        path: the folder; ``root`` or a folder under it.
        root: the private root (the folder ``setting`` names); it and everything under it must be this user's
            and closed to writes by group and others; the folders above it may also be root's, or sticky.
        setting: the variable that moves ``root`` (named in the fix the error gives).
        create: make the missing folders (mode 0700), top-down, each only after its parent passed.

    Returns:
        The resolved path: the one that was checked, for the caller to use.

    Raises:
        UntrustedCacheError: a folder on the way is not safe ([Note: what makes a folder or file private]).
        FileNotFoundError: a folder is missing and ``create`` is False.
        OSError: a folder cannot be made or examined.
    """
    target = Path(os.path.realpath(path))
    private_root = Path(os.path.realpath(root))
    for current in (*reversed(target.parents), target):
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(current, 0o700)
            except FileExistsError:  # made by another process meanwhile: examined below like any other
                pass
            st = os.lstat(current)
        private = current == target or current.is_relative_to(private_root)
        problem = _folder_problem(current, st, private, setting)
        if problem is not None:
            raise problem
    return target


def _file_problem(path: Path, st: os.stat_result, *, secret: bool, closed: bool) -> UntrustedCacheError | None:
    """Why the file ``path`` (``st``: its lstat, or fstat of a descriptor opened without following links) is not
    safe to read, or None. ``closed``: its folder is closed to group and others."""
    remove = "remove it (mmaemu makes it again)"
    if stat.S_ISLNK(st.st_mode):
        return _untrusted(path, st, "is a symbolic link", remove)
    if not stat.S_ISREG(st.st_mode):
        return _untrusted(path, st, "is not a regular file", remove)
    euid = _euid()
    if euid is None:
        return None
    if st.st_uid != euid:
        return _untrusted(path, st, "belongs to another user", "have its owner or root remove it")
    if st.st_nlink != 1:
        return _untrusted(path, st, f"has {st.st_nlink} names (hard links)", remove)
    mask = _ACCESS_GO if secret else (stat.S_IWOTH if closed else _WRITE_GO)
    if st.st_mode & mask and (secret or not _group_write_only_by_me(path, st)):
        if secret:
            return _untrusted(path, st, "is readable or writable by group or others", remove)
        return _untrusted(path, st, "is writable by others", f"{remove}; numba writes its files with the umask's "
                          "mode, so keep a umask that leaves them closed to others' writes (022 or 077, not 000)")
    return None


def check_private_entries(folder: Path, setting: str) -> None:
    """Check every entry of ``folder`` (a folder :func:`private_dir` returned) as a file another user cannot
    have written; subfolders as private folders (``setting``: as in :func:`private_dir`).

    Raises:
        UntrustedCacheError: the first entry at fault.
        OSError: the folder cannot be listed.
    """
    folder_st = os.stat(folder)
    closed = not folder_st.st_mode & 0o007 and (not folder_st.st_mode & 0o070 or (_private_group(folder_st.st_gid)
                                                                                  and _plain_mode(folder)))
    with os.scandir(folder) as entries:
        for entry in entries:
            path = Path(entry.path)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                problem = _folder_problem(path, st, True, setting)
            else:
                problem = _file_problem(path, st, secret=False, closed=closed)
            if problem is not None:
                raise problem


def read_private_file(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the secret file ``path`` (in a folder :func:`private_dir` returned); None when
    there is none. Opened without following a link and without blocking (a named pipe), checked on the descriptor.

    Raises:
        UntrustedCacheError: the file is a link, not a regular file, another user's, has several names, or
            group or others can read or write it.
        OSError: it cannot be read.
    """
    if not _NOFOLLOW and os.path.islink(path):  # Windows: no O_NOFOLLOW
        raise _untrusted(path, os.lstat(path), "is a symbolic link", "remove it (mmaemu makes it again)")
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a symbolic link
            raise _untrusted(path, os.lstat(path), "is a symbolic link", "remove it (mmaemu makes it again)") from exc
        raise
    try:
        problem = _file_problem(path, os.fstat(fd), secret=True, closed=False)
        if problem is not None:
            raise problem
        return os.read(fd, limit)
    finally:
        os.close(fd)


def create_private_file(path: Path, data: bytes) -> None:
    """Write a new file ``path`` (mode 0600; never through a link; in a folder :func:`private_dir` returned).

    Raises:
        FileExistsError: something is already there (another process made it first, or a link).
        OSError: it cannot be written.
    """
    fd = os.open(path, _CREATE_FLAGS, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
