"""Output folders owned by one run, and the one call that opens a run in one.

:func:`open_run` is how every command that writes a run folder starts. It

* refuses a folder that already holds files unless the run resumes, so a second run never
  appends to, overwrites or mixes with an earlier run's outputs;
* with ``resume``, refuses a folder that does not hold a run of the same command
  (``run.json`` records the command and the format of its files), saying what the folder is;
* takes an exclusive lock on ``RUN/.lock`` (``flock``; the file is opened without following
  links and must be a regular file of its own): a second process pointed at the same folder
  stops with an error naming the process that holds it. The lock is released when the
  process exits, however it exits (a kill -9 included), so a crashed run can be resumed;
* saves the run's resolved configuration as ``config.json``; a resumed run continues with
  the configuration saved there, and may change only the options declared
  ``option(..., resumable=True)`` (:func:`evonorm_core.experiment.config.resume_config`).

:class:`RunDir` alone is the folder rule and the lock, for programs that add files to a folder
without being a run of their own; :func:`file_lock` is the same lock held around one update of
a file that several processes rewrite (wait for it rather than fail).
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .config import ConfigError, load_config, option_values, resume_config, save_config
from .files import CorruptFileError, atomic_write_json, read_json, read_json_object

LOCK_FILE = ".lock"
RUN_FILE = "run.json"
CONFIG_FILE = "config.json"


class RunDirError(RuntimeError):
    """The output folder cannot be used by this run; the message says why and what to do."""


@dataclass(frozen=True)
class RunKind:
    """The kind of run a folder holds: the command that makes it (as the user types it, e.g.
    ``classification/train.py``) and the format of its files (raised when they change so that
    an older folder is not resumed by code that reads it differently)."""

    command: str
    format: int = 1

    def manifest(self) -> dict[str, Any]:
        return {"command": self.command, "format": self.format}


class RunDir:
    """Own ``path`` for this process: create it, check it, lock it.

    ``resume=False``: ``path`` must not exist or be empty. ``resume=True``: ``path`` may hold
    files (whether it must hold a run is :func:`open_run`'s check). ``flag`` is the option
    that resumes, quoted in the error message.
    """

    def __init__(self, path: str | Path, *, resume: bool = False, flag: str = "--resume") -> None:
        self.path = Path(path)
        existing = check_run_folder(self.path, resume=resume, flag=flag)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a parent that is a file, no permission, a read-only disk
            raise RunDirError(
                f"cannot create output folder {str(self.path)!r}: {error.strerror}; choose another output folder"
            ) from None
        self._lock: int | None = _acquire_lock(self.path / LOCK_FILE)
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


def check_run_folder(path: Path, *, resume: bool = False, flag: str = "--resume") -> list[str]:
    """What :class:`RunDir` checks before it takes ``path``, without taking it (a command that will
    open several runs checks them all first): :class:`RunDirError` if ``path`` is not a folder, or
    holds files and ``resume`` is False. Returns the names it holds."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"output folder {str(path)!r} exists and is not a folder")
    existing = _contents(path)
    if existing and not resume:
        raise RunDirError(f"output folder {str(path)!r} is not empty ({_shown(existing)}); pass {flag} to continue "
                          "the run in it, or choose another output folder")
    return existing


@dataclass
class Run:
    """A run opened by :func:`open_run`: its locked folder and the configuration in force."""

    folder: RunDir
    config: Any

    @property
    def path(self) -> Path:
        return self.folder.path

    def close(self) -> None:
        """Release the folder's lock (it is also released when the process exits)."""
        self.folder.close()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_run(path: str | Path, kind: RunKind, config: Any = None, *, resume: bool = False,
             flag: str | None = "--resume") -> Run:
    """Open the run of ``kind`` in ``path``: check the folder, lock it, save the configuration.

    Without ``resume`` the folder must be missing or empty and becomes a run of ``kind`` with
    ``config``. With ``resume`` it must hold a run of ``kind`` in this format (else
    :class:`RunDirError` saying what the folder is); ``config`` must then agree with the
    configuration saved there on every option that is not resumable (else
    :class:`~evonorm_core.experiment.config.ConfigError` naming them) and is saved in its place.
    ``config=None``: the command keeps no configuration here (an evaluation adding its results
    to a run; a program that saves its own). ``flag`` is the option that resumes, named in the
    refusals (``None``: the command has none).
    """
    path = Path(path)
    if resume and not path.exists():
        _check_holds_run(path, kind, flag)  # raises: a missing folder is refused, not created
    folder = RunDir(path, resume=resume, flag=flag or "--resume")
    try:
        if resume:
            _check_holds_run(path, kind, flag)  # under the lock: the run cannot change meanwhile
            if config is not None:
                config = _continued(path, type(config), option_values(config))
        if config is not None:
            save_config(path / CONFIG_FILE, config)
        if not resume:
            atomic_write_json(path / RUN_FILE, kind.manifest())  # after config.json: a run.json marks a whole run
    except BaseException:
        folder.close()
        raise
    return Run(folder, config)


def resumed_config(path: str | Path, kind: RunKind, config_type: type, changes: Mapping[str, Any],
                   flag: str | None = "--resume") -> Any:
    """The configuration a ``--resume`` of the run in ``path`` continues with: the saved one with
    ``changes`` (the flags given), which may change only resumable options. Read before the run
    is opened, so that a command can build what the run needs; :func:`open_run` checks it again."""
    _check_holds_run(Path(path), kind, flag)
    return _continued(Path(path), config_type, changes)


def _continued(path: Path, config_type: type, changes: Mapping[str, Any]) -> Any:
    """The configuration saved in ``path`` with ``changes``; a refused change names the folder."""
    try:
        return resume_config(load_config(path / CONFIG_FILE, config_type), changes)
    except ConfigError as error:
        raise ConfigError(f"cannot resume the run in {str(path)!r}: {error}") from None


def holds_run(path: str | Path) -> bool:
    """Whether ``path`` holds a run opened by :func:`open_run` (of any kind): grids resume such cells."""
    return (Path(path) / RUN_FILE).is_file()


def is_run_of(path: str | Path, kind: RunKind) -> bool:
    """Whether ``path`` holds a run that ``kind``'s command made (in any format); :class:`CorruptFileError` if
    its run record is damaged."""
    record = Path(path) / RUN_FILE
    return record.is_file() and read_json_object(record, what="run record", keys=("command",))["command"] == kind.command


def _check_holds_run(path: Path, kind: RunKind, flag: str | None) -> None:
    """Raise :class:`RunDirError` saying what ``path`` is unless it holds a run of ``kind`` in its format."""
    hint = f" (without {flag} a new run starts there)" if flag else ""
    where = f"no run of {kind.command} in {str(path)!r}"
    if not path.exists():
        raise RunDirError(f"{where}: the folder does not exist{hint}")
    if not path.is_dir():
        raise RunDirError(f"{where}: it exists and is not a folder")
    if not (path / RUN_FILE).is_file():
        existing = _contents(path)
        if not existing:
            raise RunDirError(f"{where}: the folder is empty{hint}")
        raise RunDirError(f"{where}: it holds no {RUN_FILE} saying which command made it ({_shown(existing)}); "
                          "a folder written by another program or by a version before run folders recorded their "
                          "command cannot be resumed: start a new run in another folder")
    found = read_json(path / RUN_FILE, what="run record")
    if not (isinstance(found, dict) and isinstance(found.get("command"), str) and type(found.get("format")) is int):
        raise CorruptFileError(f"run record {str(path / RUN_FILE)!r} is not one (it must be a JSON object with a "
                               f"'command' string and a 'format' integer, got {str(found)[:80]!r}); restore it or "
                               "start a new run in another folder")
    if found["command"] != kind.command:
        raise RunDirError(f"{where}: it is a run folder of {found['command']}; {kind.command} cannot continue it, "
                          "choose another folder")
    if found["format"] != kind.format:
        raise RunDirError(f"{where}: it is a run folder of {kind.command} in format {found['format']}, this version "
                          f"reads format {kind.format}; start a new run in another folder")


def _contents(path: Path) -> list[str]:
    """The names in ``path`` besides the lock (none if it is not a folder)."""
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _acquire_lock(path: Path, *, wait: bool = False) -> int:
    """An open, ``flock``-ed descriptor of the lock file ``path``, which must be a regular file of
    its own: opened without following a link (a ``.lock`` symlink would make the run truncate its
    target) and refused if it is a link, not a regular file, or has a second name (a hard link).
    Held by another process: wait for it (``wait``) or raise :class:`RunDirError` naming it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise _not_a_lock(path, "a symbolic link" if error.errno == errno.ELOOP else "not a regular file") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise _not_a_lock(path, "not a regular file" if not stat.S_ISREG(info.st_mode) else
                          f"a file with {info.st_nlink} names (a hard link)")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
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
    return fd


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold the exclusive lock ``path`` (created if missing; the same checks as a run folder's
    ``.lock``) for the ``with`` block, waiting while another process holds it: the guard around a
    read-modify-write of a file that concurrent processes update, so that none loses another's change."""
    fd = _acquire_lock(Path(path), wait=True)
    try:
        yield
    finally:
        os.close(fd)


def _not_a_lock(path: Path, what: str) -> RunDirError:
    return RunDirError(f"lock file {str(path)!r} is {what}; a run's lock must be a regular file of its own, so it is "
                       "not used: delete it and start again")
