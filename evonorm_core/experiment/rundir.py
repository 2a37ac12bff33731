"""Output folders owned by one run.

A long job writes into its output folder only after :class:`RunDir` has

* refused a folder that already holds files unless the job resumes (so a second run never
  appends to, overwrites or mixes with an earlier run's outputs), and
* taken an exclusive lock on ``RUN/.lock`` (``flock``): a second process pointed at the same
  folder stops with an error naming the process that holds it. The lock is released when
  the process exits, however it exits (a kill -9 included), so a crashed run can be resumed.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class RunDirError(RuntimeError):
    """The output folder cannot be used by this run; the message says why and what to do."""


class RunDir:
    """Own ``path`` for this process: create it, check it, lock it.

    ``resume=False``: ``path`` must not exist or be empty. ``resume=True``: ``path`` may hold
    the run to continue (whether it must is the caller's decision). ``flag`` is the option
    that resumes, quoted in the error message.
    """

    def __init__(self, path: str | Path, *, resume: bool = False, flag: str = "--resume") -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"output folder {str(self.path)!r} exists and is not a folder")
        existing = sorted(p.name for p in self.path.iterdir() if p.name != LOCK_FILE) if self.path.is_dir() else []
        if existing and not resume:
            shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
            raise RunDirError(
                f"output folder {str(self.path)!r} is not empty ({shown}); pass {flag} to continue the run in it, "
                "or choose another output folder"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = _acquire_lock(self.path / LOCK_FILE)
        self.resumed = bool(existing)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def close(self) -> None:
        """Release the lock (it is also released when the process exits)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _acquire_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise RunDirError(
                f"output folder {str(path.parent)!r} is in use by {holder}; two runs cannot write one folder "
                "(wait for it to finish, stop it, or choose another output folder)"
            ) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()}\n".encode(), 0)
    os.set_inheritable(fd, False)
    return fd
