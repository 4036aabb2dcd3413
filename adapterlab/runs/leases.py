"""Which runs a process is training right now, so that shards on one machine can help each other.

Each run of a sharded protocol has one owner shard (:func:`adapterlab.runs.tuning.owner`), and a hash
splits the runs unevenly: one shard can run out while the other still has many. A shard with nothing of
its own ready then takes another shard's run, and a lease keeps two processes from training the same run:
a file named after the run in the store's ``.leases`` folder (the store reads only its top level), created
only if absent and holding the process id. A lease whose process has died (a killed shard) is stale and is
taken over. Leases hold for processes of one machine: shards on two machines split by owner alone.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class Leases:
    """The leases in ``folder``: :meth:`take` a run before training it, :meth:`release` it after."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def _path(self, identity: str) -> Path:
        return self.folder / f"{hashlib.sha256(identity.encode()).hexdigest()[:20]}.lease"

    def take(self, identity: str) -> bool:
        """Lease the run named by ``identity`` to this process; False when a live process holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(identity)
        for _ in range(2):
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    holder = int(path.read_text())
                except (OSError, ValueError):
                    return False  # its holder is writing it this instant (or it is damaged): held
                if holder == os.getpid():
                    return True
                if _alive(holder):
                    return False
                path.unlink(missing_ok=True)  # its process died: the lease is stale
                continue
            with os.fdopen(descriptor, "w") as file:
                file.write(str(os.getpid()))
            return True
        return False

    def release(self, identity: str) -> None:
        """Drop this process's lease on the run (another's is left alone)."""
        path = self._path(identity)
        try:
            if int(path.read_text() or 0) == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass
