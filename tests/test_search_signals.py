"""SIGINT and SIGTERM stop a running search with one line, exit status 128 + signal, no traceback and a
checkpoint to resume from, on the local backend and on a local Ray (whose driver installs its own SIGTERM
handler that aborts the process, and whose cluster must not outlive the search)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evonorm_core.search.driver import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
RAY_PROCESSES = "raylet|gcs_server|ray::"


def start_search(output_dir: Path, backend: str) -> subprocess.Popen:
    """``search/evolve.py`` on one worker, returned once it runs its first candidates."""
    search = subprocess.Popen(
        [sys.executable, "search/evolve.py", "--backend", backend, "--workers", "1", "--max-candidates", "50",
         "--anchors", "resnet50_cifar", "--output-dir", str(output_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in search.stdout:
        if line.startswith("layer search:"):  # printed just before the search runs
            break
    else:
        pytest.fail(f"the search ended before it started: {search.communicate()}")
    time.sleep(3.0)
    return search


def ray_processes() -> set[str]:
    found = subprocess.run(["pgrep", "-f", RAY_PROCESSES], capture_output=True, text=True).stdout
    return set(found.split())


def stop(search: subprocess.Popen, signum: int) -> tuple[str, str]:
    search.send_signal(signum)
    out, err = search.communicate(timeout=60)
    return out, err


def assert_stopped_cleanly(search: subprocess.Popen, out: str, err: str, signum: int, output_dir: Path) -> None:
    name = signal.Signals(signum).name
    assert search.returncode == 128 + signum, (search.returncode, out, err)
    assert f"stopped by {name}; finished candidates are checkpointed: add --resume to continue" in out
    assert "Traceback" not in out + err and "SIGTERM received" not in err
    assert read_checkpoint(output_dir) is not None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_local_search_with_one_line_and_a_checkpoint(signum, tmp_path):
    search = start_search(tmp_path / "run", "local")
    out, err = stop(search, signum)
    assert_stopped_cleanly(search, out, err, signum, tmp_path / "run")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_ray_search_and_its_local_cluster(signum, tmp_path):
    pytest.importorskip("ray", reason="the Ray backend needs ray (pip install -e '.[search]')")
    before = ray_processes()
    search = start_search(tmp_path / "run", "ray")
    assert ray_processes() - before, "the search started no local Ray"
    out, err = stop(search, signum)
    assert_stopped_cleanly(search, out, err, signum, tmp_path / "run")
    deadline = time.monotonic() + 30.0
    while (left := ray_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"Ray processes outlived the search: {left}"
