"""mmaemu._private: a per-user folder or file is trusted only when no other user can have written it.

Modes are tested as any user; files of another user need ``os.chown`` (root only); ownership as any user by
making this process's effective uid another one (``os.geteuid`` monkeypatched).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mmaemu import _private
from mmaemu._private import check_private_entries, create_private_file, private_dir, read_private_file
from mmaemu.errors import MmaemuError, UntrustedCacheError

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="owners and modes are POSIX")

OTHER_UID = 65534
as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="making a file owned by another user needs root")


@pytest.fixture(autouse=True)
def no_private_group(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Group write counts as others' write in these tests (the folders' group may be this user's private group,
    [Note: user private groups]), except in the tests of that rule."""
    if "upg" not in request.keywords:
        monkeypatch.setattr(_private, "_private_group", lambda gid: False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A folder of this user's that only this user can write (the folders above it are pytest's and the system's)."""
    os.chmod(tmp_path, 0o700)
    return tmp_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _dir(path: Path, root: Path, create: bool = True) -> Path:
    return private_dir(path, root=root, setting="MMAEMU_CACHE_DIR", create=create)


def test_missing_folders_are_made_private_and_the_resolved_path_is_returned(home: Path) -> None:
    root = home / "cache"
    target = root / "numba" / "backends_x"
    assert _dir(target, root) == target.resolve()
    assert [_mode(p) for p in (root, root / "numba", target)] == [0o700] * 3
    link = home / "link"
    link.symlink_to(root)
    assert _dir(link / "numba", link) == (root / "numba").resolve()  # the path checked is the path used
    with pytest.raises(FileNotFoundError):
        _dir(root / "absent", root, create=False)
    assert not (root / "absent").exists()


@pytest.mark.parametrize("mode,what", [(0o777, "writable by others"), (0o770, "writable by its group"),
                                       (0o1777, "writable by others"), (0o1770, "writable by its group")])
def test_the_private_root_and_what_is_under_it_must_be_closed_to_others(home: Path, mode: int, what: str) -> None:
    """A sticky private folder does not help: others may still create files in it."""
    root = home / "cache"
    for faulty in (root, root / "numba"):
        _dir(root / "numba" / "sub", root)
        os.chmod(faulty, mode)
        with pytest.raises(UntrustedCacheError, match=rf"{faulty} is {what} \(owner .*, mode {mode:04o}\).*"
                                                      rf"chmod go-w '{faulty}'.*MMAEMU_CACHE_DIR"):
            _dir(root / "numba" / "sub", root)
        os.chmod(faulty, 0o700)


@pytest.mark.parametrize("mode,trusted", [(0o777, False), (0o775, False), (0o1777, True), (0o1775, True),
                                          (0o755, True)])
def test_a_folder_above_the_root_may_be_sticky(home: Path, mode: int, trusted: bool) -> None:
    """Above the root (``/tmp`` for ``MMAEMU_CACHE_DIR=/tmp/x``) only a sticky folder may be writable by others:
    there nobody else can rename this user's entry away."""
    above = home / "tmp"
    above.mkdir()
    os.chmod(above, mode)
    if trusted:
        assert _dir(above / "x", above / "x") == (above / "x").resolve()
        assert _mode(above / "x") == 0o700
    else:
        with pytest.raises(UntrustedCacheError, match=f"{above} is writable"):
            _dir(above / "x", above / "x")
        assert not (above / "x").exists()  # nothing is made inside a folder that failed


def test_a_file_where_a_folder_should_be(home: Path) -> None:
    (home / "cache").write_text("")
    with pytest.raises(UntrustedCacheError, match="is not a folder"):
        _dir(home / "cache" / "numba", home / "cache")


def test_another_users_folders_fail(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen from another uid, this user's folders belong to another user (root's above them are fine)."""
    root = home / "cache"
    _dir(root, root)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(home).st_uid + 4242)
    with pytest.raises(UntrustedCacheError, match=r"belongs to another user.*set MMAEMU_CACHE_DIR to a folder of "):
        _dir(root, root)


@as_root
def test_a_folder_of_another_user_fails_at_any_depth(home: Path) -> None:
    root = home / "cache"
    for faulty in (home, root, root / "numba"):
        _dir(root / "numba", root)
        os.chown(faulty, OTHER_UID, -1)
        with pytest.raises(UntrustedCacheError, match=f"{faulty} belongs to another user"):
            _dir(root / "numba", root)
        os.chown(faulty, 0, -1)


def test_without_owners_only_the_kind_of_entry_is_checked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where os.geteuid does not exist (Windows) modes and owners are not checked; links and kinds still are."""
    monkeypatch.delattr(os, "geteuid")
    os.chmod(home, 0o777)
    try:
        assert _dir(home / "cache", home / "cache") == (home / "cache").resolve()
        (home / "cache" / "f").write_bytes(b"k")
        os.chmod(home / "cache" / "f", 0o666)
        check_private_entries(home / "cache", "MMAEMU_CACHE_DIR")
        (home / "cache" / "link").symlink_to(home / "cache" / "f")
        with pytest.raises(UntrustedCacheError, match="is a symbolic link"):
            check_private_entries(home / "cache", "MMAEMU_CACHE_DIR")
    finally:
        os.chmod(home, 0o700)


def _entries(home: Path, folder_mode: int) -> Path:
    folder = _dir(home / "cache", home / "cache")
    os.chmod(folder, folder_mode)
    return folder


@pytest.mark.parametrize("folder_mode,file_mode,trusted", [
    (0o700, 0o644, True), (0o755, 0o644, True), (0o700, 0o664, True),  # the umask 002 case, closed folder
    (0o750, 0o664, False), (0o700, 0o646, False), (0o700, 0o666, False)])
def test_files_in_a_cache_folder(home: Path, folder_mode: int, file_mode: int, trusted: bool) -> None:
    folder = _entries(home, folder_mode)
    (folder / "f.nbi").write_bytes(b"x")
    os.chmod(folder / "f.nbi", file_mode)
    if trusted:
        check_private_entries(folder, "MMAEMU_CACHE_DIR")
    else:
        with pytest.raises(UntrustedCacheError, match=rf"f.nbi is writable by others .*mode {file_mode:04o}"):
            check_private_entries(folder, "MMAEMU_CACHE_DIR")


@pytest.mark.parametrize("plant,what", [
    (lambda f: (f / "x.nbi").symlink_to(f.parent / "elsewhere"), "is a symbolic link"),
    (lambda f: os.mkfifo(f / "x.nbi"), "is not a regular file"),
    (lambda f: os.link(f.parent / "elsewhere", f / "x.nbi"), "has 2 names"),
    (lambda f: (f / "sub").mkdir(mode=0o777) or os.chmod(f / "sub", 0o777), "sub is writable by others"),
], ids=["symlink", "fifo", "hard link", "open subfolder"])
def test_entries_that_are_not_plain_private_files(home: Path, plant: object, what: str) -> None:
    folder = _entries(home, 0o700)
    (home / "elsewhere").write_bytes(b"x")
    os.chmod(home / "elsewhere", 0o600)
    plant(folder)  # type: ignore[operator]
    with pytest.raises(UntrustedCacheError, match=what):
        check_private_entries(folder, "MMAEMU_CACHE_DIR")


@as_root
def test_a_file_of_another_user_in_a_cache_folder(home: Path) -> None:
    folder = _entries(home, 0o700)
    (folder / "x.nbi").write_bytes(b"x")
    os.chown(folder / "x.nbi", OTHER_UID, -1)
    with pytest.raises(UntrustedCacheError, match="x.nbi belongs to another user"):
        check_private_entries(folder, "MMAEMU_CACHE_DIR")


@pytest.mark.parametrize("mode,trusted", [(0o600, True), (0o400, True), (0o640, False), (0o604, False),
                                          (0o620, False), (0o602, False)])
def test_a_secret_is_closed_to_group_and_others(home: Path, mode: int, trusted: bool) -> None:
    folder = _entries(home, 0o700)
    (folder / "replay.key").write_bytes(b"k" * 32)
    os.chmod(folder / "replay.key", mode)
    if trusted:
        assert read_private_file(folder / "replay.key", 64) == b"k" * 32
    else:
        with pytest.raises(UntrustedCacheError, match="replay.key is readable or writable by group or others"):
            read_private_file(folder / "replay.key", 64)


def test_a_secret_that_is_a_link_or_a_pipe_or_absent(home: Path) -> None:
    folder = _entries(home, 0o700)
    assert read_private_file(folder / "replay.key", 64) is None
    (home / "elsewhere").write_bytes(b"k" * 32)
    os.chmod(home / "elsewhere", 0o600)
    (folder / "replay.key").symlink_to(home / "elsewhere")
    with pytest.raises(UntrustedCacheError, match="is a symbolic link"):
        read_private_file(folder / "replay.key", 64)
    (folder / "replay.key").unlink()
    os.mkfifo(folder / "replay.key", 0o600)
    with pytest.raises(UntrustedCacheError, match="is not a regular file"):  # and it does not block
        read_private_file(folder / "replay.key", 64)


def test_a_new_secret_is_0600_whatever_the_umask_and_never_written_through_a_link(home: Path) -> None:
    folder = _entries(home, 0o700)
    before = os.umask(0)
    try:
        create_private_file(folder / "replay.key", b"k" * 32)
    finally:
        os.umask(before)
    assert _mode(folder / "replay.key") == 0o600
    (folder / "other.key").symlink_to(home / "target")  # a dangling link: O_EXCL refuses it too
    with pytest.raises(FileExistsError):
        create_private_file(folder / "other.key", b"k")
    assert not (home / "target").exists()


def test_the_error_is_an_oserror_and_an_mmaemu_error() -> None:
    assert issubclass(UntrustedCacheError, OSError) and issubclass(UntrustedCacheError, MmaemuError)


def test_a_secret_that_is_a_folder(home: Path) -> None:
    """Found by the hostile pass: os.open of a folder succeeds; the check must come before any read."""
    folder = _entries(home, 0o700)
    (folder / "replay.key").mkdir(mode=0o700)
    with pytest.raises(UntrustedCacheError, match="replay.key is not a regular file"):
        read_private_file(folder / "replay.key", 64)


class _Pw:
    def __init__(self, name: str, uid: int, gid: int) -> None:
        self.pw_name, self.pw_uid, self.pw_gid = name, uid, gid


class _Gr:
    def __init__(self, name: str, members: list[str]) -> None:
        self.gr_name, self.gr_mem = name, members


def _user_database(monkeypatch: pytest.MonkeyPatch, users: list[_Pw], groups: dict[int, _Gr]) -> None:
    import grp
    import pwd

    by_uid = {u.pw_uid: u for u in users}
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: by_uid[uid])
    monkeypatch.setattr(pwd, "getpwall", lambda: list(users))
    monkeypatch.setattr(grp, "getgrgid", lambda gid: groups[gid])
    _private._private_group.cache_clear()
    monkeypatch.setattr(_private, "_private_group", _private._private_group.__wrapped__)


@pytest.mark.upg
@pytest.mark.parametrize("case,trusted", [
    ("own group, no other member", True),  # a umask-002 ~/.cache on a user-private-group system
    ("own group, listing the user", True),
    ("another member", False),
    ("another name", False),
    ("another user's primary group", False),
    ("not the user's primary group", False),
])
def test_group_write_through_the_users_private_group(home: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                                      trusted: bool) -> None:
    """[Note: user private groups]: a folder writable by the user's private group (mode 0775) is trusted,
    above the cache folder and as the cache folder itself, and so are 0664 files in it; any other group is not.
    Others' write is never trusted."""
    uid, gid = os.geteuid(), os.stat(home).st_gid
    users = [_Pw("ann", uid, gid if case != "not the user's primary group" else gid + 1)]
    if case == "another user's primary group":
        users.append(_Pw("bob", uid + 1, gid))
    members = {"own group, listing the user": ["ann"], "another member": ["bob"]}.get(case, [])
    _user_database(monkeypatch, users, {gid: _Gr("staff" if case == "another name" else "ann", members)})
    above, root = home / "dot-cache", home / "dot-cache" / "mmaemu"
    root.mkdir(parents=True)
    os.chmod(above, 0o775)
    os.chmod(root, 0o775)
    (root / "x.nbi").write_bytes(b"")
    os.chmod(root / "x.nbi", 0o664)
    if trusted:
        assert _dir(root, root) == root.resolve()
        check_private_entries(root, "MMAEMU_CACHE_DIR")
    else:
        with pytest.raises(UntrustedCacheError, match="writable by its group"):
            _dir(root, root)
    os.chmod(above, 0o777)
    with pytest.raises(UntrustedCacheError, match="writable by others"):
        _dir(root, root)


def _acl(entries: list[tuple[int, int, int]]) -> bytes:
    """A POSIX access ACL as Linux stores it (``system.posix_acl_access``: version 2, then tag, permissions, id)."""
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


def _grant_write(path: Path, uid: int) -> None:
    """An ACL entry giving user ``uid`` read, write and search on ``path``; skips where the file system has none."""
    anyone = 0xFFFFFFFF  # ACL_UNDEFINED_ID
    blob = _acl([(0x01, 7, anyone), (0x02, 7, uid), (0x04, 5, anyone), (0x10, 7, anyone), (0x20, 0, anyone)])
    try:
        os.setxattr(path, "system.posix_acl_access", blob)
    except (AttributeError, OSError) as exc:
        pytest.skip(f"no POSIX ACLs here: {exc}")


@pytest.mark.upg
def test_an_acl_granting_another_user_write_is_not_the_private_groups_write(home: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With a POSIX ACL the mode's group bits are the ACL's mask, not the owning group's permissions: a folder
    whose ACL lets another user write shows g+w even when its group is the user's private group, and is refused
    all the same (as the cache folder and above it); so is a file whose ACL lets another user write it in a
    folder whose ACL lets them in."""
    uid, gid = os.geteuid(), os.stat(home).st_gid
    _user_database(monkeypatch, [_Pw("ann", uid, gid)], {gid: _Gr("ann", [])})
    above, root = home / "dot-cache", home / "dot-cache" / "mmaemu"
    root.mkdir(parents=True)
    os.chmod(above, 0o755)
    os.chmod(root, 0o700)
    _grant_write(root, OTHER_UID)
    assert _mode(root) & 0o070 == 0o070  # the mask, in the group bits
    with pytest.raises(UntrustedCacheError, match="writable by its group"):
        _dir(root, root)
    os.setxattr(root, "system.posix_acl_access", _acl([(0x01, 7, 0xFFFFFFFF), (0x04, 0, 0xFFFFFFFF),
                                                         (0x20, 0, 0xFFFFFFFF)]))  # back to 0700
    _grant_write(above, OTHER_UID)
    with pytest.raises(UntrustedCacheError, match="writable by its group"):
        _dir(root, root)
    os.chmod(above, 0o755)
    os.removexattr(above, "system.posix_acl_access")
    assert _dir(root, root) == root.resolve()
    (root / "x.nbi").write_bytes(b"")
    os.chmod(root / "x.nbi", 0o664)
    check_private_entries(root, "MMAEMU_CACHE_DIR")  # a closed folder: nobody else reaches its files
    blob = _acl([(0x01, 7, 0xFFFFFFFF), (0x02, 5, OTHER_UID), (0x04, 0, 0xFFFFFFFF), (0x10, 5, 0xFFFFFFFF),
                 (0x20, 0, 0xFFFFFFFF)])
    os.setxattr(root, "system.posix_acl_access", blob)  # another user may enter (r-x), not write the folder
    check_private_entries(root, "MMAEMU_CACHE_DIR")  # 0664: the other user is in the "other" class, read only
    _grant_write(root / "x.nbi", OTHER_UID)  # now they may write the file too
    with pytest.raises(UntrustedCacheError, match="x.nbi is writable by others"):
        check_private_entries(root, "MMAEMU_CACHE_DIR")
