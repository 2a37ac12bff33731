"""Shared test setup: deterministic, small thread count, and skip markers with reasons."""
import os

import pytest
import torch
from hypothesis import settings

from evonorm_core import ops, registry

# Opt-in checks, left out of the default run: tests/mutation holds the planted-bug snippet
# check (tools/plant_bugs.py), which fails when a refactor moves a planted line. Naming the
# folder runs it: python -m pytest tests/mutation
collect_ignore = ["mutation"]


# The property tests draw the same examples on every run by default ("default": derandomized), so that
# the README's test command and CI pass or fail reproducibly; HYPOTHESIS_PROFILE=explore draws new
# examples each run (to look for counterexamples; a failing one is kept in .hypothesis/ and replayed).
settings.register_profile("default", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config):
    # 2 torch threads per test process, or the cores shared out among pytest-xdist's workers (-n)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    default = max(1, min(2, (os.cpu_count() or 1) // workers))
    torch.set_num_threads(int(os.environ.get("EVONORM_TEST_THREADS", default)))
    ops.bypass_autograd_cache()  # compiled tests see this tree's operators' autograd, not a cached graph


def pytest_collection_modifyitems(config, items):
    # Tests marked forks_autograd run the suite's forked workers that train (grid cells, search pools). PyTorch
    # refuses autograd in children forked after the parent ran autograd on fake tensors (torch.compile, export:
    # children.autograd_survives_fork), so these go first, before any test of the same process compiled anything:
    # pytest-xdist hands tests to its workers in this order, and each runs them in it. A stable sort keeps
    # pytest-randomly's shuffle (done before this hook) within both parts.
    items.sort(key=lambda item: item.get_closest_marker("forks_autograd") is None)
    if not torch.cuda.is_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; none is available on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture
def one_thread():
    """Run the test with one intra-op thread, restoring the count afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def torch_threads(request):
    """Run the test with ``request.param`` intra-op threads (parametrize it with ``indirect=True``), restoring
    the count afterwards; the fixture's value is that count."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def scratch_registry():
    """Let the test register or override norm-act layers; every registration is undone afterwards."""
    tables = (registry._FACTORIES, registry._BATCH_STATISTICS, registry._KEYS)
    saved = [dict(table) for table in tables]
    yield
    for table, before in zip(tables, saved):
        table.clear()
        table.update(before)
