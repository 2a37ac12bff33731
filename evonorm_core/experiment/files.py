"""Reading and writing a run's files without losing them and without running code from them.

* Writes are atomic: the data go to a temporary file in the same folder, are flushed and
  fsynced, and the file is renamed over the target, so a crash or kill leaves either the
  old or the new file, never half of one.
* JSON and JSONL readers raise :class:`CorruptFileError` naming the file, the line and
  what to do, instead of a bare ``JSONDecodeError``.
* Checkpoints hold plain data (dicts, lists, tensors, numbers, strings) and are loaded with
  ``torch.load(weights_only=True)``: a file with pickled objects is refused, never
  unpickled (unpickling can run arbitrary code).
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch


class CorruptFileError(ValueError):
    """A run file that cannot be read as what it should be; the message names it and the fix."""


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


@contextlib.contextmanager
def _atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces ``path`` atomically when the block ends
    without error (written to a temporary file, fsynced, renamed; removed on error)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def append_jsonl(path: str | Path, record: Any, *, sync: bool = False) -> None:
    """Append one JSON line to ``path`` (flushed; fsynced when ``sync``)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())


def iter_jsonl(path: str | Path, *, what: str = "log") -> Iterator[Any]:
    """The records of a JSONL file, one per line; a bad line raises :class:`CorruptFileError`
    naming the file and line number. A final line without newline (a write cut short by a
    kill) is reported the same way."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                cut = "" if line.endswith("\n") else " (the line is incomplete: the writer was interrupted)"
                raise CorruptFileError(
                    f"{what} {str(path)!r}, line {number}: not valid JSON ({error.msg}){cut}. "
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
    """``torch.save`` ``state`` (plain data only) atomically."""
    with _atomic_file(path) as f:
        torch.save(state, f)


def load_checkpoint(path: str | Path, *, what: str = "checkpoint", map_location: Any = "cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` with ``weights_only=True``.

    Errors name the file: missing (``FileNotFoundError``), holding pickled objects (refused,
    :class:`CorruptFileError`), truncated or not a checkpoint (:class:`CorruptFileError`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {str(path)!r}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CorruptFileError(
            f"{what} {str(path)!r} holds Python objects other than tensors and plain data; it is refused "
            f"because unpickling them could run code ({str(error).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise CorruptFileError(
            f"{what} {str(path)!r} is truncated or not a PyTorch checkpoint ({str(error).splitlines()[0]}). "
            "Delete it (and resume from an earlier snapshot, if any) or start a new run."
        ) from None
    if not isinstance(state, dict):
        raise CorruptFileError(f"{what} {str(path)!r} holds a {type(state).__name__}, not a checkpoint dict")
    return state


def require_keys(state: dict, keys: tuple[str, ...], path: str | Path, what: str = "checkpoint") -> None:
    """Raise :class:`CorruptFileError` if ``state`` lacks any of ``keys``."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CorruptFileError(f"{what} {str(path)!r} lacks {missing}: it was not written by this program or is damaged")
