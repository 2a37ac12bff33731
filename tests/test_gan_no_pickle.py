"""No file the GAN's IS/FID reads back is unpickled (docs/reliability.md, "No pickle read back").

Every file an evaluation (``gan/evaluate.py`` and the in-training one) reads back is replaced in
turn with a payload that creates a marker file when unpickled: each is refused with an error that
names it, and the marker never appears. The FID reference statistics are the suite's ``.npz``
of plain arrays (checked on load), and torch-fidelity's pickle cache is never consulted.
"""
import io
import json
import os
import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch_fidelity.metric_fid
import torch_fidelity.utils

from evonorm_core.experiment.files import CorruptFileError
from evonorm_suite.gan import digits_classifier, evaluate, reference_statistics
from evonorm_suite.gan.config import PRESETS
from evonorm_suite.gan.data import digits_dataset
from evonorm_suite.gan.trainer import Trainer

TINY = dict(norm="evonorm_s0", channels=8, dim_z=8, shared_dim=8, depth=1, batch_size=8, micro_batch=8,
            total_steps=1, sample_every=1000, save_every=1, eval_every=0)


class Payload:
    """Creates ``marker`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def payloads(marker: Path) -> dict[str, bytes]:
    """The ways a pickle can be dressed up as a file of the suite."""
    buffer = io.BytesIO()
    torch.save({"model": Payload(marker), "mu": Payload(marker)}, buffer)
    npz = io.BytesIO()
    np.savez(npz, mu=np.array([Payload(marker)], dtype=object), sigma=np.zeros((1, 1)), key=np.array("x"))
    return {"pickle": pickle.dumps({"mu": Payload(marker)}), "torch.save": buffer.getvalue(), "npz": npz.getvalue()}


@pytest.fixture(scope="module")
def gan_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / "seed0"
    Trainer(replace(PRESETS["digits"], **TINY), digits_dataset(16), run_dir).train()
    return run_dir


@pytest.fixture
def no_unsafe_load(monkeypatch):
    """Fail the test if anything calls torch.load without weights_only=True, or torch-fidelity's cache."""
    real_load = torch.load

    def checked_load(*args, **kwargs):
        assert kwargs.get("weights_only") is True, f"torch.load without weights_only=True: {args[:1]}"
        return real_load(*args, **kwargs)

    def no_cache(*args, **kwargs):
        raise AssertionError("torch-fidelity's pickle cache was consulted")

    monkeypatch.setattr(torch, "load", checked_load)
    for module in (torch_fidelity.utils, torch_fidelity.metric_fid):
        monkeypatch.setattr(module, "cache_lookup_one_recompute_on_miss", no_cache)
    monkeypatch.setattr(torch_fidelity.utils, "cache_lookup_group_recompute_all_on_any_miss", no_cache)


def options(cache: Path) -> evaluate.EvalOptions:
    return evaluate.EvalOptions(num_samples=32, reference_samples=64, cache_root=str(cache), batch_size=32,
                                standing_stats=0)


def copied(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "seed0"
    shutil.copytree(run, target, ignore=shutil.ignore_patterns(".lock"))
    return target


def test_reference_statistics_are_plain_arrays_keyed_by_data_and_extractor(gan_run, tmp_path, no_unsafe_load):
    run = copied(gan_run, tmp_path)
    first = evaluate.evaluate_run(str(run), options=options(tmp_path / "cache"))
    (stored,) = (tmp_path / "cache").iterdir()
    assert stored.name.startswith("gan-digits-builtin-16px-64-digits-classifier-") and stored.suffix == ".npz"
    with np.load(stored, allow_pickle=False) as arrays:
        key = json.loads(str(arrays["key"]))
        assert arrays["mu"].shape == (64,) and arrays["sigma"].shape == (64, 64)
    weights = digits_classifier.weights_file(16)
    assert key == {"data": "gan-digits-builtin-16px-64", "count": 64, "extractor": "digits-classifier",
                   "layer": "features", "weights_sha256": reference_statistics.weights_digest(str(weights)),
                   "torch_fidelity": key["torch_fidelity"], "format": 1}
    again = evaluate.evaluate_run(str(run), options=options(tmp_path / "cache"))  # from the stored statistics
    assert again["fid"] == pytest.approx(first["fid"], rel=1e-6)
    fewer = evaluate.EvalOptions(**{**vars(options(tmp_path / "cache")), "reference_samples": 32})
    evaluate.evaluate_run(str(run), options=fewer)  # other data: a file of its own
    assert len(list((tmp_path / "cache").iterdir())) == 2


@pytest.mark.parametrize("kind", ["pickle", "torch.save", "npz"])
def test_a_pickle_in_place_of_the_reference_statistics_is_refused_and_never_run(gan_run, tmp_path, kind,
                                                                                no_unsafe_load):
    run, marker = copied(gan_run, tmp_path), tmp_path / "pwned"
    evaluate.evaluate_run(str(run), options=options(tmp_path / "cache"))
    (stored,) = (tmp_path / "cache").iterdir()
    stored.write_bytes(payloads(marker)[kind])
    with pytest.raises(SystemExit, match=f"FID reference statistics '.*{stored.name}' cannot be used: .* Delete it"):
        evaluate.main([str(run), "--num-samples", "32", "--reference-samples", "64", "--standing-stats", "0",
                       "--cache-root", str(tmp_path / "cache")])
    assert not marker.exists()


@pytest.mark.parametrize("damage, why", [
    (lambda a: {**a, "mu": a["mu"][:-1]}, r"mu has shape \(63,\) and sigma \(64, 64\)"),
    (lambda a: {**a, "sigma": a["sigma"].astype(np.int64)}, "expected float32 or float64"),
    (lambda a: {**a, "mu": np.full_like(a["mu"], np.nan)}, "NaN or infinite"),
    (lambda a: {**a, "sigma": a["sigma"] + np.triu(np.ones_like(a["sigma"]), 1)}, "not symmetric"),
    (lambda a: {**a, "key": np.array(a["key"].item().replace('"count": 64', '"count": 65'))}, "it was made for"),
    (lambda a: {"mu": a["mu"], "sigma": a["sigma"]}, r"holds the arrays \['mu', 'sigma'\]"),
])
def test_damaged_reference_statistics_are_named(gan_run, tmp_path, damage, why):
    run = copied(gan_run, tmp_path)
    evaluate.evaluate_run(str(run), options=options(tmp_path / "cache"))
    (stored,) = (tmp_path / "cache").iterdir()
    with np.load(stored, allow_pickle=False) as arrays:
        damaged = damage({name: arrays[name] for name in arrays.files})
    with open(stored, "wb") as f:
        np.savez(f, **damaged)
    with pytest.raises(CorruptFileError, match=why):
        evaluate.evaluate_run(str(run), options=options(tmp_path / "cache"))


def test_a_pickle_in_place_of_any_file_the_evaluation_reads_is_refused(gan_run, tmp_path, monkeypatch,
                                                                        no_unsafe_load):
    """run.json, the checkpoint, the digits classifier and --inception-weights: each replaced in turn."""
    marker, real = tmp_path / "pwned", digits_classifier.weights_file(16)
    classifier = tmp_path / "classifier.pt"
    monkeypatch.setattr(digits_classifier, "cache_path", lambda resolution: classifier)
    args = ["--num-samples", "32", "--reference-samples", "64", "--standing-stats", "0",
            "--cache-root", str(tmp_path / "cache")]
    cases = {  # file replaced -> what the refusal says
        "run.json": r"run record '.*run.json' is not valid JSON",
        "checkpoints/last.pt": r"GAN checkpoint '.*last.pt' holds Python objects .* refused",
        "classifier": r"digits classifier '.*classifier.pt' holds Python objects .* refused",
        "inception": r"is not torch-fidelity's .* refused",
    }
    for name, refusal in cases.items():
        run = copied(gan_run, tmp_path / name.replace("/", "_"))
        shutil.copy(real, classifier)
        target = {"classifier": classifier, "inception": tmp_path / evaluate.INCEPTION_FILE}.get(name, run / name)
        target.write_bytes(payloads(marker)["torch.save"] if target.suffix == ".pt" or name == "inception"
                           else payloads(marker)["pickle"])
        extra = ["--inception-weights", str(target)] if name == "inception" else []
        with pytest.raises(SystemExit, match=refusal):
            evaluate.main([str(run), *args, *extra])
        assert not marker.exists(), name


def test_the_in_training_evaluation_reads_only_checked_arrays(tmp_path, monkeypatch, no_unsafe_load):
    """The digits run evaluates every eval_every steps against the statistics in the default cache folder:
    those are the suite's arrays too, and a pickle put there is refused, never run."""
    marker = tmp_path / "pwned"
    classifier = digits_classifier.weights_file(16)
    monkeypatch.setattr(digits_classifier, "cache_path", lambda resolution: classifier)
    monkeypatch.setenv("EVONORM_CACHE_DIR", str(tmp_path / "cache"))
    config = replace(PRESETS["digits"], **{**TINY, "eval_every": 1, "eval_samples": 32})
    scalars = Trainer(config, digits_dataset(16), tmp_path / "first").train()
    assert np.isfinite(scalars["fid"])
    (stored,) = (tmp_path / "cache" / "fid_reference").iterdir()
    stored.write_bytes(payloads(marker)["npz"])
    with pytest.raises(CorruptFileError, match=f"{stored.name}' cannot be used: it is not an .npz of plain arrays"):
        Trainer(config, digits_dataset(16), tmp_path / "second").train()
    assert not marker.exists()
