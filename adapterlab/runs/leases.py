"""Which runs a process is training right now, so that shards on one machine can help each other.

Each run of a sharded protocol has one owner shard (:func:`adapterlab.runs.tuning.owner`), and a hash
splits the runs unevenly: one shard can run out while the other still has many. A shard with nothing of
its own ready then takes another shard's run, and a lease keeps two processes from training the same run.

A lease is a kernel lock (``flock``; ``msvcrt.locking`` on Windows) on a file named after the run in the
store's ``.leases`` folder (the store reads only its top level). The kernel drops the lock when its process
ends, however it ends (Ctrl-C, SIGKILL, a full disk), so a lease never goes stale and nobody has to decide
whether an old one may be taken over: there is no takeover, and so no takeover race. What the file holds
(who took it and since when) only informs a waiting process; an empty, damaged or hand-written file is
harmless, because the lock, not the text, decides. Leases hold for the processes of one machine (and of a
local disk); shards on several machines split the runs by owner alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

#: Never through a symbolic link, never blocking (a named pipe planted at a lease's name would block a read).
_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NONBLOCK", 0))


class LeaseError(ValueError):
    """A lease file that cannot be used (a folder or a link in its place): the message says what to remove."""


def _lock(descriptor: int) -> bool:
    """Take the kernel lock on an open file without waiting: False when another process holds it."""
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
    except (BlockingIOError, PermissionError):
        return False
    except OSError as error:
        if fcntl is None:  # msvcrt reports a held lock as a plain OSError
            return False
        raise error
    return True


@dataclass
class Lease:
    """A run this process holds: the open, locked file. :meth:`Leases.release` gives it back."""

    identity: str
    path: Path
    descriptor: int


class Leases:
    """The leases in ``folder``: :meth:`take` a run before training it, :meth:`release` it after, and
    :meth:`holder` says who holds a run another process is training."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self._held: dict[str, Lease] = {}

    def _path(self, identity: str) -> Path:
        return self.folder / f"{hashlib.sha256(identity.encode()).hexdigest()[:20]}.lock"

    def _open(self, path: Path) -> int:
        """The lease file, opened for locking: a regular file of its own, since its description is written into
        it (a hard link would have another file truncated and overwritten, a named pipe would block a read)."""
        try:
            descriptor = os.open(path, _OPEN_FLAGS, 0o644)
        except (IsADirectoryError, NotADirectoryError):
            raise LeaseError(f"{path} is a folder, not a lease file: remove it (no process uses a "
                             "lease folder) and run the command again") from None
        except OSError:
            if path.is_symlink():
                raise LeaseError(f"{path} is a symbolic link, not a lease file: remove it and run the "
                                 "command again") from None
            raise
        status = os.fstat(descriptor)
        # No links but ours: the holder released (removed) it after our open; `take` then opens the new one.
        if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1:
            os.close(descriptor)
            what = "a hard link to another file" if stat.S_ISREG(status.st_mode) else "not a regular file"
            raise LeaseError(f"{path} is {what}, which a lease never writes: remove it and run the command again")
        return descriptor

    def _check_folder(self) -> None:
        """The leases folder is a real folder of the store: a link would put the leases, and what they write,
        somewhere else."""
        if self.folder.is_symlink() or (self.folder.exists() and not self.folder.is_dir()):
            raise LeaseError(f"{self.folder} is a link or a file, not the store's leases folder: remove it and run "
                             "the command again")

    def take(self, identity: str, what: str = "") -> bool:
        """Lease the run named by ``identity`` to this process (``what`` describes it to a waiting process);
        False when another live process holds it. Taking a run this process holds already is True."""
        if identity in self._held:
            return True
        self._check_folder()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(identity)
        while True:
            descriptor = self._open(path)
            try:
                if not _lock(descriptor):
                    os.close(descriptor)
                    return False
                # The holder before us may have removed the file between our open and our lock: then our lock
                # is on a file nobody else can find, and we start again on the one at ``path``.
                try:
                    here = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    here = None
                mine = os.fstat(descriptor)
                if here is None or (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
                    os.close(descriptor)
                    continue
            except BaseException:
                os.close(descriptor)
                raise
            break
        self._held[identity] = Lease(identity, path, descriptor)
        self._describe(descriptor, what)
        return True

    @staticmethod
    def _describe(descriptor: int, what: str) -> None:
        """Write who holds the lease, for :meth:`holder`. A write that fails (a full disk) leaves the lock
        held and the description empty: the lease still works."""
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "run": what})
        try:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, text.encode())  # at offset 0: nothing was read or written on it yet
        except OSError:
            pass

    def release(self, identity: str) -> None:
        """Give back this process's lease on the run (a run it does not hold is left alone). The file is
        removed while still locked, so a process that opened it meanwhile sees it gone and opens anew."""
        lease = self._held.pop(identity, None)
        if lease is None:
            return
        try:
            os.unlink(lease.path)
        except OSError:
            pass
        os.close(lease.descriptor)

    def release_all(self) -> None:
        for identity in list(self._held):
            self.release(identity)

    def holder(self, identity: str) -> str | None:
        """Who holds the run, in words ("pid 4242 on host since 14:02, houlsby lr 0.001 seed 0"), or None
        when no process does. "another process" when its description cannot be read (written this instant,
        or lost to a full disk)."""
        path = self._path(identity)
        try:
            descriptor = self._open(path) if path.exists() else None
        except OSError:
            return "another process"
        if descriptor is None:
            return None
        try:
            if _lock(descriptor):
                return None
            text = os.read(descriptor, 4096).decode(errors="replace")
        except OSError:
            text = ""
        finally:
            os.close(descriptor)  # closing drops a lock taken only to look
        try:
            info = json.loads(text)
            since = time.strftime("%H:%M", time.localtime(float(info["since"])))
            run = f", {info['run']}" if info.get("run") else ""
            return f"pid {int(info['pid'])} on {info['host']} since {since}{run}"
        except (ValueError, KeyError, TypeError, OverflowError):
            return "another process"
