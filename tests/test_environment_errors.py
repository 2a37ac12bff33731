"""A half-set distributed environment and an unreachable Ray address are clear errors after a bounded wait,
never a silent wait (docs/reliability.md, "Inputs bounded before work starts")."""
import socket
import time

import pytest

from evonorm_core.experiment import distributed
from evonorm_core.experiment.distributed import DistributedSetupError, environment_ranks, wait_for_rendezvous
from evonorm_suite.gan import train_biggan
from evonorm_suite.search import backends, evolve

from .distributed_world import free_port


@pytest.mark.parametrize("env, expected", [
    ({}, (0, 1, 0)),
    ({"RANK": "0"}, (0, 1, 0)),
    ({"WORLD_SIZE": "1", "LOCAL_RANK": "0"}, (0, 1, 0)),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, (1, 2, 1)),
])
def test_a_complete_environment_gives_the_ranks(env, expected):
    assert environment_ranks(env) == expected


@pytest.mark.parametrize("env, message", [
    ({"RANK": "1"}, r"RANK=1 is set but WORLD_SIZE is not set: a rank needs a WORLD_SIZE above it"),
    ({"RANK": "2", "WORLD_SIZE": "1"}, r"RANK=2 is set but WORLD_SIZE=1"),
    ({"WORLD_SIZE": "2"}, r"half set \(WORLD_SIZE=2; RANK, MASTER_ADDR, MASTER_PORT not set\)"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}, r"half set \(.*; MASTER_ADDR not set\)"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "one"}, r"RANK='one' is not an integer >= 0"),
    ({"WORLD_SIZE": "0"}, r"WORLD_SIZE='0' is not an integer >= 1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not a port"),
])
def test_a_half_set_or_inconsistent_environment_is_refused_naming_the_variables(env, message):
    with pytest.raises(DistributedSetupError, match=message) as info:
        environment_ranks(env)
    assert "torchrun --nproc_per_node N" in str(info.value)


def test_a_rank_whose_rank_0_never_answers_stops_after_the_bounded_wait():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "EVONORM_RENDEZVOUS_SECONDS": "1.5"}
    started = time.monotonic()
    with pytest.raises(DistributedSetupError, match=r"rank 1 of 2: nothing answered at MASTER_ADDR:MASTER_PORT="
                                                    r"127.0.0.1:\d+ within 1.5 s"):
        wait_for_rendezvous(1, 2, env)
    assert time.monotonic() - started < 10
    with socket.socket() as server:  # once rank 0 listens, the wait ends
        server.bind(("127.0.0.1", 0))
        server.listen()
        wait_for_rendezvous(1, 2, {**env, "MASTER_PORT": str(server.getsockname()[1])})


def test_programs_say_a_half_set_environment_in_one_line_before_waiting(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **k: pytest.fail("it waited"))
    with pytest.raises(SystemExit, match=r"^error: a distributed environment is half set \(WORLD_SIZE=2; RANK"):
        train_biggan.main(["--run-dir", str(tmp_path), "--total-steps", "1"])


def test_an_unreachable_ray_address_is_a_clear_error_after_a_bounded_wait():
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"--ray-address '{address}': nothing answered at {address} within 1 s"):
        backends.check_ray_address(address, seconds=1)
    assert time.monotonic() - started < 10
    with pytest.raises(ConnectionError, match="ray://127.0.0.1"):
        backends.check_ray_address(f"ray://{address}", seconds=0.5)
    for bad in ("nowhere", "host:port", ":6379", "host:70000"):
        with pytest.raises(ValueError, match=f"--ray-address '{bad}' is not 'auto', HOST:PORT or ray://HOST:PORT"):
            backends.check_ray_address(bad)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        backends.check_ray_address(f"127.0.0.1:{server.getsockname()[1]}")


def test_the_search_names_an_unreachable_ray_address_in_one_line_and_makes_no_run_folder(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.setattr(backends, "RAY_CONNECT_SECONDS", 1.0)
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit):
        evolve.main(["--data", "digits", "--backend", "ray", "--ray-address", address, "--max-candidates", "1",
                     "--output-dir", str(tmp_path / "search")])
    err = capsys.readouterr().err
    assert f"error: --ray-address '{address}': nothing answered at {address} within 1 s" in err
    assert "Traceback" not in err and not (tmp_path / "search").exists()
