"""Reading and writing a run's files without losing them and without running code from them.

* Writes are atomic: the data go to a temporary file in the same folder, are flushed and
  fsynced, and the file is renamed over the target, so a crash or kill leaves either the
  old or the new file, never half of one. The file gets the permissions ``open`` would give
  it (the target's own, or 0o666 less the umask).
* JSON and JSONL readers raise :class:`CorruptFileError` naming the file, the line and
  what to do, instead of a bare ``JSONDecodeError``; :func:`read_json_object` also refuses a
  file that is not an object with the keys its reader needs, instead of a ``KeyError`` later.
* Checkpoints hold plain data (dicts, lists, tensors, numbers, strings) and are loaded with
  ``torch.load(weights_only=True)``: a file with pickled objects is refused, never
  unpickled (unpickling can run arbitrary code).
* Checkpoints carry their format version and the SHA-256 of their bytes, in the comment of
  the zip archive ``torch.save`` writes (so they remain plain PyTorch files that
  ``torch.load`` reads), and are verified before they are unpickled: a changed bit, a
  truncation or a newer format is an error naming the file. A file without that comment
  (written by ``torch.save`` elsewhere, or before checkpoints carried it) is read if the
  CRC-32 of every record in its archive holds. Only regular files are read (a FIFO or a
  device would hang or never end), and no more bytes than their size.
* A full disk is :class:`DiskFullError`, one line naming the file; the file being replaced
  is left as it was, and a log line that did not fit is taken back.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import pickle
import re
import secrets
import stat
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch

CHECKPOINT_FORMAT = 1
_SEAL = re.compile(rb"evonorm-checkpoint format=(\d) sha256=([0-9a-f]{64})")
_SEAL_LENGTH = len(b"evonorm-checkpoint format=1 sha256=") + 64
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITTEN_HERE = "it was not written by this program or is damaged"


class CorruptFileError(ValueError):
    """A run file that cannot be read as what it should be; the message names it and the fix."""


class DiskFullError(OSError):
    """A write that did not fit on the disk (or in the user's quota); the message names the file."""

    def __init__(self, path: str | Path, error: OSError) -> None:
        super().__init__(
            f"no space left to write {str(path)!r} ({os.strerror(error.errno)}); nothing was changed there: "
            "free space on that disk (or choose an output folder on another one) and run the command again"
            + (" with --resume" if Path(path).name != "run.json" else "")
        )
        self.errno = error.errno


@contextlib.contextmanager
def _disk_full_named(path: str | Path) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised inside the block into :class:`DiskFullError` naming ``path``."""
    try:
        yield
    except OSError as error:
        if error.errno in _NO_SPACE and not isinstance(error, DiskFullError):
            raise DiskFullError(path, error) from None
        raise


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not supported on every platform / file system
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _new_file_beside(path: Path) -> tuple[int, str]:
    """A new empty file in ``path``'s folder to hold its next content, with the permissions ``open(path, "w")``
    leaves: ``path``'s own where it exists, else 0o666 less the umask (``mkstemp``'s 0o600 would hide a
    run's results from the group it shares them with)."""
    while True:
        tmp = str(path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp"))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:  # another writer's name: 64 random bits make it all but impossible
            continue
        try:
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        return fd, tmp


@contextlib.contextmanager
def _atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces ``path`` atomically when the block ends
    without error (written to a temporary file, fsynced, renamed; removed on error)."""
    path = Path(path)
    with _disk_full_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _new_file_beside(path)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (write, fsync, rename)."""
    with _atomic_file(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """The parsed content of ``path``; :class:`CorruptFileError` naming it if it is not JSON."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {str(path)!r}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptFileError(
            f"{what} {str(path)!r} is not valid JSON ({error}); it was truncated or edited. "
            "Restore it or delete the run folder and start again."
        ) from None


def read_json_object(path: str | Path, *, what: str, keys: tuple[str, ...] = (),
                     advice: str = NOT_WRITTEN_HERE) -> dict:
    """The JSON object in ``path``; :class:`CorruptFileError` naming it, followed by ``advice``, if it is
    not valid JSON, not an object or lacks one of ``keys``."""
    data = read_json(path, what=what)
    if not isinstance(data, dict):
        raise CorruptFileError(f"{what} {str(path)!r} is not a JSON object: {advice}")
    require_keys(data, keys, path, what, advice=advice)
    return data


def append_jsonl(path: str | Path, record: Any, *, sync: bool = False) -> None:
    """Append one JSON line to ``path`` (flushed; fsynced when ``sync``). On a full disk the
    part of the line that was written is taken back and :class:`DiskFullError` raised."""
    line = (json.dumps(record) + "\n").encode("utf-8")
    with _disk_full_named(path), open(path, "ab") as f:
        size = f.seek(0, os.SEEK_END)
        try:
            f.write(line)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        except OSError as error:
            if error.errno in _NO_SPACE:
                f.truncate(size)  # no torn line for the next reader; shrinking needs no space
            raise


def iter_jsonl(path: str | Path, *, what: str = "log") -> Iterator[Any]:
    """The records of a JSONL file, one per line; a bad line raises :class:`CorruptFileError`
    naming the file and line number. A final line without newline (a write cut short by a
    kill) is reported the same way."""
    path = Path(path)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
                yield json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                why = error.msg if isinstance(error, json.JSONDecodeError) else "bytes that are not UTF-8 text"
                cut = "" if raw.endswith(b"\n") else " (the line is incomplete: the writer was interrupted)"
                raise CorruptFileError(
                    f"{what} {str(path)!r}, line {number}: not valid JSON ({why}){cut}. "
                    "Delete that line and what follows it, then resume."
                ) from None


def read_jsonl(path: str | Path, *, limit: int | None = None, what: str = "log") -> list[Any]:
    """The first ``limit`` (default: all) records of a JSONL file."""
    records = []
    if limit == 0:
        return records
    for record in iter_jsonl(path, what=what):
        records.append(record)
        if limit is not None and len(records) >= limit:
            break
    return records


def save_checkpoint(path: str | Path, state: dict) -> None:
    """``torch.save`` ``state`` (plain data only) atomically, sealed with its format and SHA-256."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, seal(buffer.getvalue()))


def seal(archive: bytes) -> bytes:
    """``archive`` (a zip file as ``torch.save`` writes it, without a comment) with the comment
    ``evonorm-checkpoint format=N sha256=HEX``: HEX is the SHA-256 of every byte before the comment."""
    if archive[-22:-18] != b"PK\x05\x06" or archive[-2:] != b"\x00\x00":
        raise ValueError("torch.save wrote no zip archive without a comment; checkpoints cannot be sealed")
    unsealed = archive[:-2] + _SEAL_LENGTH.to_bytes(2, "little")
    digest = hashlib.sha256(unsealed).hexdigest()
    return unsealed + f"evonorm-checkpoint format={CHECKPOINT_FORMAT} sha256={digest}".encode()


def read_regular_file(path: str | Path, *, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file (of at most ``max_bytes``): a FIFO, a
    device or a folder is refused by name instead of being read until it ends (it may never)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"no {what} at {str(path)!r}") from None
    except IsADirectoryError:
        raise CorruptFileError(f"{what} {str(path)!r} is a folder, not a file") from None
    size = _regular_size(fd, path, what, max_bytes)
    with os.fdopen(fd, "rb") as f:
        return f.read(size)


def _regular_size(fd: int, path: Path, what: str, max_bytes: int | None) -> int:
    """The size of ``fd``, a regular file of at most ``max_bytes``; else it is closed and :class:`CorruptFileError`
    raised."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and (max_bytes is None or info.st_size <= max_bytes):
        return info.st_size
    os.close(fd)
    if stat.S_ISDIR(info.st_mode):
        raise CorruptFileError(f"{what} {str(path)!r} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise CorruptFileError(f"{what} {str(path)!r} is not a regular file (a FIFO, device or socket); "
                               "it is not read: point to the file itself")
    raise CorruptFileError(f"{what} {str(path)!r} holds {info.st_size} bytes, more than the {max_bytes} "
                           "such a file can have; it is not read: it is not one, delete or replace it")


def _verified_archive(data: bytes, path: Path, what: str) -> bytes:
    """``data`` if its seal holds, or, unsealed, if every record's CRC-32 holds; else :class:`CorruptFileError`."""
    found = _SEAL.fullmatch(data[-_SEAL_LENGTH:]) if len(data) > _SEAL_LENGTH + 22 else None
    if found is not None and data[-_SEAL_LENGTH - 2:-_SEAL_LENGTH] == _SEAL_LENGTH.to_bytes(2, "little"):
        if int(found[1]) != CHECKPOINT_FORMAT:
            raise CorruptFileError(f"{what} {str(path)!r} is in checkpoint format {int(found[1])}, this version "
                                   f"reads format {CHECKPOINT_FORMAT}: use the version that wrote it, or start a new run")
        if hashlib.sha256(data[:-_SEAL_LENGTH]).hexdigest() != found[2].decode():
            raise CorruptFileError(_damaged(path, what, "its SHA-256 is not the one it was written with"))
        return data
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
            if not any(name.endswith("/data.pkl") for name in archive.namelist()):
                raise zipfile.BadZipFile("the archive holds no data.pkl record")
    except Exception as error:  # noqa: BLE001 (zipfile fails in many ways on a damaged archive)
        raise CorruptFileError(_damaged(path, what, f"not a whole PyTorch zip archive: {error}", truncated=True)) from None
    if bad is not None:
        raise CorruptFileError(_damaged(path, what, f"the CRC-32 of its record {bad!r} does not hold"))
    return data


def _damaged(path: Path, what: str, why: str, truncated: bool = False) -> str:
    kind = "is truncated or not a PyTorch checkpoint" if truncated else "is damaged"
    return (f"{what} {str(path)!r} {kind} ({why}); it is not used. Delete it (and resume from an earlier snapshot, "
            "if any) or start a new run.")


def load_checkpoint(path: str | Path, *, what: str = "checkpoint", map_location: Any = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` with ``weights_only=True``.

    Before anything is unpickled its seal is verified (format and SHA-256; a file without one,
    written by ``torch.save`` elsewhere, must pass the CRC-32 of its zip records). Errors name
    the file: missing (``FileNotFoundError``), not a regular file, damaged, truncated, in another
    format, holding pickled objects (refused) or not a dict (:class:`CorruptFileError`).
    """
    path = Path(path)
    data = _verified_archive(read_regular_file(path, what=what), path, what)
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CorruptFileError(
            f"{what} {str(path)!r} holds Python objects other than tensors and plain data; it is refused "
            f"because unpickling them could run code ({str(error).splitlines()[0]})"
        ) from None
    except Exception as error:  # noqa: BLE001 (a foreign archive may fail anywhere in torch's reader)
        first = (str(error).splitlines() or [type(error).__name__])[0]
        raise CorruptFileError(_damaged(path, what, f"torch.load: {first}", truncated=True)) from None
    if not isinstance(state, dict):
        raise CorruptFileError(f"{what} {str(path)!r} holds a {type(state).__name__}, not a checkpoint dict")
    return state


def require_keys(state: dict, keys: tuple[str, ...], path: str | Path, what: str = "checkpoint",
                 advice: str = NOT_WRITTEN_HERE) -> None:
    """Raise :class:`CorruptFileError` naming ``path`` and the missing keys, then ``advice``, if ``state``
    lacks any of ``keys``."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CorruptFileError(f"{what} {str(path)!r} lacks {missing}: {advice}")
