"""Where candidates are trained: in-process, in a local process pool, or as Ray tasks.

Each backend is an :class:`evonorm_core.search.driver.Executor`. A candidate that raises,
runs past ``time_limit`` seconds or takes its worker process down comes back as a
rejection (stage "crash" or "timeout") and the search goes on.
"""
from __future__ import annotations

import concurrent.futures as futures
import signal
import socket
import threading
import time
import traceback
from typing import Callable

from evonorm_core.experiment.children import training_pool
from evonorm_core.search.results import CandidateResult, Stage

BACKENDS = ("local", "ray")
RAY_CONNECT_SECONDS = 20.0
Evaluator = Callable[[dict], CandidateResult]


class CandidateTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CandidateTimeout


def evaluate_safely(evaluator: Evaluator, genome: dict, time_limit: float | None) -> CandidateResult:
    """``evaluator(genome)``, with exceptions and overruns turned into rejections.

    The time limit uses ``SIGALRM`` (in the main thread of a Unix process); it interrupts
    Python code between torch ops, not inside one long op (the pool's watchdog covers that).
    """
    start = time.monotonic()
    use_alarm = bool(time_limit) and threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")
    previous = signal.signal(signal.SIGALRM, _on_alarm) if use_alarm else None
    if use_alarm:
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        return evaluator(genome)
    except CandidateTimeout:
        return CandidateResult.reject(Stage.TIMEOUT, f"ran past the time limit of {time_limit:g} s")
    except Exception as error:  # a broken candidate must not stop the search
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return CandidateResult.reject(Stage.CRASH, f"{last} after {time.monotonic() - start:.1f} s")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class SequentialExecutor:
    """Evaluates one candidate at a time in this process (``--workers 1``)."""

    capacity = 1

    def __init__(self, evaluator: Evaluator, time_limit: float | None = None) -> None:
        self.evaluator, self.time_limit = evaluator, time_limit
        self.queue: list[tuple[int, CandidateResult]] = []

    def submit(self, candidate_id: int, genome: dict) -> None:
        self.queue.append((candidate_id, genome))

    def wait(self) -> list[tuple[int, CandidateResult]]:
        candidate_id, genome = self.queue.pop(0)
        return [(candidate_id, evaluate_safely(self.evaluator, genome, self.time_limit))]

    def close(self) -> None:
        self.queue.clear()


class ProcessPoolExecutor:
    """``workers`` forked processes. A worker stuck past twice the time limit is replaced and the
    candidates on the pool are recorded as timed out. A worker that dies takes the pool down with
    every candidate on it, and which one killed it is unknown: each of them runs again alone (those
    submitted meanwhile wait), and only a candidate that takes its worker down alone is recorded as
    crashed."""

    def __init__(self, evaluator: Evaluator, workers: int, time_limit: float | None = None) -> None:
        self.evaluator, self.capacity, self.time_limit = evaluator, workers, time_limit
        self.pool = self._new_pool()
        self.running: dict[futures.Future, tuple[int, dict]] = {}
        self.suspects: list[tuple[int, dict]] = []  # were on a pool that died: each runs again alone
        self.waiting: list[tuple[int, dict]] = []  # submitted while the suspects run
        self.isolating = False  # a suspect runs alone now

    def _new_pool(self) -> futures.ProcessPoolExecutor:
        return training_pool(self.capacity, "the search's candidates")

    def submit(self, candidate_id: int, genome: dict) -> None:
        if self.suspects or self.isolating:
            self.waiting.append((candidate_id, genome))
        else:
            self._start(candidate_id, genome)

    def _start(self, candidate_id: int, genome: dict) -> None:
        future = self.pool.submit(evaluate_safely, self.evaluator, genome, self.time_limit)
        self.running[future] = (candidate_id, genome)

    def _start_next(self) -> None:
        """With nothing running: the next suspect alone, else every candidate that waited for the suspects."""
        self.isolating = bool(self.suspects)
        if self.suspects:
            self._start(*self.suspects.pop(0))
            return
        for candidate_id, genome in self.waiting:
            self._start(candidate_id, genome)
        self.waiting.clear()

    def wait(self) -> list[tuple[int, CandidateResult]]:
        if not self.running:
            self._start_next()
        if not self.running:
            return []
        watchdog = None if not self.time_limit else 2 * self.time_limit
        done, _ = futures.wait(self.running, timeout=watchdog, return_when=futures.FIRST_COMPLETED)
        if not done:
            return self._restart("timeout", f"worker stuck past {watchdog:g} s")
        finished, broken = [], False
        for future in done:
            try:
                result = future.result()
            except futures.process.BrokenProcessPool:
                broken = True
                continue
            finished.append((self.running.pop(future)[0], result))
        return finished + self._pool_died() if broken else finished

    def _pool_died(self) -> list[tuple[int, CandidateResult]]:
        """A candidate that ran alone killed its worker: it crashed. Of several, each becomes a suspect."""
        if len(self.running) == 1:
            return self._restart("crash", "the worker process died (it ran alone)")
        self.suspects.extend(self.running.values())
        self._replace_pool()
        return []

    def _restart(self, stage: str, reason: str) -> list[tuple[int, CandidateResult]]:
        """Replace the pool; every candidate that was running on it is reported with ``stage``."""
        lost = [(candidate_id, CandidateResult.reject(stage, reason)) for candidate_id, _ in self.running.values()]
        self._replace_pool()
        return lost

    def _replace_pool(self) -> None:
        for process in list(getattr(self.pool, "_processes", {}).values()):
            process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()
        self.running.clear()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class RayExecutor:
    """Candidates as Ray tasks (``max_retries`` on worker/node failure), on a Ray started
    here (``address="local"``, ``num_cpus=workers``: never one found running on the machine)
    or the cluster at ``address`` (``"auto"``: the one running)."""

    def __init__(self, evaluator: Evaluator, workers: int, time_limit: float | None = None,
                 address: str | None = None, max_retries: int = 2) -> None:
        import ray  # ~0.3 s to import, and only this backend needs it

        self.ray = ray
        if not ray.is_initialized():
            if address:
                check_ray_address(address)  # ray.init retries an address where nothing answers for ever
                ray.init(address=address, log_to_driver=False)
            else:  # a Ray of its own, never a cluster found on disk
                ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
        self.capacity = workers if not address else max(workers, int(ray.cluster_resources().get("CPU", workers)))
        self.time_limit = time_limit
        self.task = ray.remote(num_cpus=1, max_retries=max_retries)(evaluate_safely)
        self.evaluator_ref = ray.put(evaluator)
        self.running: dict[object, tuple[int, float]] = {}

    def submit(self, candidate_id: int, genome: dict) -> None:
        ref = self.task.remote(self.evaluator_ref, genome, self.time_limit)
        self.running[ref] = (candidate_id, time.monotonic())

    def wait(self) -> list[tuple[int, CandidateResult]]:
        watchdog = None if not self.time_limit else 2 * self.time_limit
        while True:
            done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=5.0)
            if done:
                break
            overdue = [ref for ref, (_, t) in self.running.items() if watchdog and time.monotonic() - t > watchdog]
            if overdue:
                return [self._give_up(ref, "timeout", f"task stuck past {watchdog:g} s") for ref in overdue]
        ref = done[0]
        try:
            return [(self.running.pop(ref)[0], self.ray.get(ref))]
        except Exception as error:  # retries exhausted: the task's worker kept dying
            self.running[ref] = self.running.get(ref, (-1, 0.0))
            return [self._give_up(ref, "crash", f"Ray task failed: {type(error).__name__}")]

    def _give_up(self, ref: object, stage: str, reason: str) -> tuple[int, CandidateResult]:
        self.ray.cancel(ref, force=True)
        candidate_id, _ = self.running.pop(ref)
        return candidate_id, CandidateResult.reject(stage, reason)

    def close(self) -> None:
        for ref in list(self.running):
            self.ray.cancel(ref, force=True)
        self.running.clear()


def check_ray_address(address: str, seconds: float | None = None) -> None:
    """Return once something answers at the Ray address (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``);
    ``ConnectionError`` naming it after ``seconds`` (default :data:`RAY_CONNECT_SECONDS`), ``ValueError``
    for an address of another form."""
    seconds = RAY_CONNECT_SECONDS if seconds is None else seconds
    target = _resolved_ray_address(address).removeprefix("ray://")
    if target == "auto":  # this Ray cannot tell where "auto" points: ray.init finds out
        return
    host, colon, port = target.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address {address!r} is not 'auto', HOST:PORT or ray://HOST:PORT")
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=max(0.1, min(5.0, deadline - time.monotonic()))).close()
            return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"--ray-address {address!r}: nothing answered at {host}:{port} within {seconds:g} s "
                    f"({error.strerror or error}); start the cluster there (ray start --head) or give its address, "
                    "or leave --ray-address out and the search starts a Ray of its own") from None
        time.sleep(0.5)


def _resolved_ray_address(address: str) -> str:
    """``auto`` as Ray resolves it (``RAY_ADDRESS``, else the cluster recorded on this machine; ``ConnectionError``
    if there is none), other addresses as they are."""
    if address != "auto":
        return address
    try:  # Ray's own resolution: a private API, so imported here and only if it is there
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return address
    return canonicalize_bootstrap_address("auto") or address


def make_executor(backend: str, evaluator: Evaluator, workers: int, time_limit: float | None,
                  ray_address: str | None = None):
    """The executor for ``backend`` ("local" or "ray") with ``workers`` concurrent candidates."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; accepted: {list(BACKENDS)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if backend == "ray":
        return RayExecutor(evaluator, workers, time_limit, ray_address)
    if workers == 1:
        return SequentialExecutor(evaluator, time_limit)
    return ProcessPoolExecutor(evaluator, workers, time_limit)
