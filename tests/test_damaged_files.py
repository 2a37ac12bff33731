"""Checkpoints carry a format and a SHA-256 verified before use; files that are not regular are not read;
a full disk is one line and tears nothing (evonorm_core.experiment.files, docs/reliability.md)."""
import errno
import io
import os
import random
from pathlib import Path

import pytest
import torch

from evonorm_core.experiment import files
from evonorm_core.experiment.files import CorruptFileError, DiskFullError, load_checkpoint, save_checkpoint

STATE = {"step": 7, "w": torch.arange(12.0).reshape(3, 4), "config": {"lr": 0.1, "norm": "evonorm_b0"}}


def same_state(state: dict) -> bool:
    return (state.keys() == STATE.keys() and state["step"] == 7 and state["config"] == STATE["config"]
            and torch.equal(state["w"], STATE["w"]))


def flipped_loads(path: Path, data: bytes, positions) -> dict[str, int]:
    """Flip one bit at each position in turn: how many loads were refused, gave the state, or gave another."""
    counts = {"refused": 0, "same": 0, "wrong": 0}
    for index, bit in positions:
        damaged = bytearray(data)
        damaged[index] ^= 1 << bit
        path.write_bytes(bytes(damaged))
        try:
            state = load_checkpoint(path)
        except CorruptFileError:
            counts["refused"] += 1
            continue
        counts["same" if same_state(state) else "wrong"] += 1
    return counts


def test_a_checkpoint_is_sealed_with_its_format_and_sha256_and_stays_a_plain_pytorch_file(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, STATE)
    data = path.read_bytes()
    assert data.endswith(b"sha256=" + files.hashlib.sha256(data[:-files._SEAL_LENGTH]).hexdigest().encode())
    assert b"evonorm-checkpoint format=1 " in data[-files._SEAL_LENGTH:]
    assert same_state(load_checkpoint(path)) and same_state(torch.load(path, weights_only=True))


def test_every_bit_flip_of_a_sealed_checkpoint_is_refused_or_changes_nothing(tmp_path):
    """The probes' 31 of 60 bit-flipped checkpoints that loaded: now every single-bit flip anywhere in the file
    is refused naming it, or (in the seal's own text, which then reads as no seal) loads the same state."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, STATE)
    data = path.read_bytes()
    counts = flipped_loads(path, data, [(i, i % 8) for i in range(len(data))])
    assert counts["wrong"] == 0 and counts["refused"] > 0.9 * len(data)
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 4
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptFileError, match=r"last.pt' is damaged \(its SHA-256 is not the one it was written with"):
        load_checkpoint(path)


def test_bit_flips_of_an_unsealed_torch_save_file_are_caught_by_its_crc(tmp_path):
    """A file written by torch.save elsewhere (or before checkpoints were sealed) has no seal: the CRC-32 of
    every record of its zip archive is checked before it is unpickled."""
    path = tmp_path / "weights.pth"
    torch.save(STATE, path)
    data = path.read_bytes()
    positions = random.Random(0).sample([(i, b) for i in range(len(data)) for b in range(8)], 600)
    counts = flipped_loads(path, data, positions)
    assert counts["wrong"] == 0 and counts["refused"] > 100


def test_a_checkpoint_of_another_format_is_refused_naming_both(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, STATE)
    data = path.read_bytes()
    head, seal = data[:-files._SEAL_LENGTH], data[-files._SEAL_LENGTH:]
    path.write_bytes(head + seal.replace(b"format=1", b"format=2"))
    with pytest.raises(CorruptFileError, match="last.pt' is in checkpoint format 2, this version reads format 1"):
        load_checkpoint(path)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04", bytes(random.Random(1).randrange(256) for _ in range(5000)),
                                     b"PK\x05\x06" + bytes(18)])
def test_empty_random_and_cut_files_are_named_not_indexerrors(tmp_path, content):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(CorruptFileError, match=r"checkpoint.pt' is truncated or not a PyTorch checkpoint"):
        load_checkpoint(path)


def test_a_fifo_a_device_or_a_folder_is_not_read(tmp_path):
    """A FIFO in place of a checkpoint would block the reader; /dev/zero would be read until memory runs out."""
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.pt"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        with pytest.raises(CorruptFileError, match=f"{path.name}' is not a regular file"):
            load_checkpoint(path)
    with pytest.raises(CorruptFileError, match="is a folder, not a file"):
        load_checkpoint(tmp_path)
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(100))
    with pytest.raises(CorruptFileError, match="holds 100 bytes, more than the 10"):
        files.read_regular_file(big, what="statistics file", max_bytes=10)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_one_error_naming_the_file_and_the_old_file_stays(tmp_path, monkeypatch):
    target = tmp_path / "last.pt"
    save_checkpoint(target, STATE)
    before = target.read_bytes()
    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(DiskFullError) as info:
        save_checkpoint(target, {"step": 8})
    assert str(info.value).startswith(f"no space left to write {str(target)!r} (No space left on device)")
    assert "free space on that disk" in str(info.value) and info.value.errno == errno.ENOSPC
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


class _FillsUp(io.FileIO):
    """A file on a disk that fills up after ``room`` more bytes (the write that does not fit raises ENOSPC)."""

    room = 10

    def write(self, data):
        written = super().write(bytes(data[: self.room]))
        if written < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return written


def test_a_log_line_that_does_not_fit_is_taken_back(tmp_path, monkeypatch):
    log = tmp_path / "candidates.jsonl"
    files.append_jsonl(log, {"id": 0})
    monkeypatch.setattr(files, "open", lambda path, mode: _FillsUp(path, "a"), raising=False)
    with pytest.raises(DiskFullError, match=r"no space left to write '.*candidates.jsonl'"):
        files.append_jsonl(log, {"id": 1, "note": "a line longer than the room left"})
    monkeypatch.undo()
    assert files.read_jsonl(log) == [{"id": 0}]  # no torn second line for the next reader
