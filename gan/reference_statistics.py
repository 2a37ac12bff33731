"""The FID reference statistics of the real images, owned by the suite: no pickle is ever read back.

torch-fidelity's own cache stores features and statistics as pickles it loads with
``weights_only=False`` (a replaced cache file runs code), so the suite never turns it on. It
computes the reference statistics itself with torch-fidelity's feature extractor and stores
them as ``<data>-<extractor>-<digest>.npz``: three plain arrays (``mu``, ``sigma`` and the
``key`` as JSON text), written atomically and read with ``np.load(allow_pickle=False)`` from a
regular file of bounded size. The file name's digest and the stored key name everything the
statistics depend on: the images (a name for the data, the image count), the extractor (its
torch-fidelity name, its feature layer and the SHA-256 of its weight file) and the
torch-fidelity version. A file that does not hold exactly that, or holds arrays of the wrong
shape, dtype or non-finite values, is an error that names it and says to delete it (it is then
recomputed).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch_fidelity
from torch.utils.data import Dataset
from torch_fidelity.feature_extractor_base import FeatureExtractorBase
from torch_fidelity.metric_fid import fid_featuresdict_to_statistics
from torch_fidelity.utils import get_featuresdict_from_dataset

from evonorm_core.experiment.files import CorruptFileError, atomic_write_bytes, read_regular_file

FORMAT = 1
MAX_BYTES = 256 * 2**20  # Inception's 2048 features: 32 MiB of float64 covariance
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
WHAT = "FID reference statistics"


@dataclass(frozen=True)
class ReferenceKey:
    """Everything reference statistics depend on (see the module docstring)."""

    data: str
    count: int
    extractor: str
    layer: str
    weights_sha256: str
    torch_fidelity: str = torch_fidelity.__version__
    format: int = FORMAT

    def text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def file_name(self) -> str:
        digest = hashlib.sha256(self.text().encode()).hexdigest()[:16]
        return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', self.data)}-{self.extractor}-{digest}.npz"


def weights_digest(path: str | None) -> str:
    """The SHA-256 of an extractor's weight file ("" for an extractor without one)."""
    if path is None:
        return ""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache_root() -> Path:
    """``$EVONORM_CACHE_DIR/fid_reference`` (default ``~/.cache/evonorm_core/fid_reference``)."""
    return Path(os.environ.get("EVONORM_CACHE_DIR", Path.home() / ".cache" / "evonorm_core")) / "fid_reference"


def reference_statistics(reference: Dataset, extractor: FeatureExtractorBase, layer: str, key: ReferenceKey | None,
                         cache_root: str | Path | None, batch_size: int, cuda: bool,
                         verbose: bool = False) -> dict[str, np.ndarray]:
    """``mu`` and ``sigma`` of ``reference``'s ``layer`` features: read from the cache when ``key`` names
    a stored file (checked), else computed (and stored, when there is a ``key``)."""
    path = Path(cache_root or default_cache_root()) / key.file_name() if key is not None else None
    if path is not None and os.path.lexists(path):
        return load_statistics(path, key)
    features = get_featuresdict_from_dataset(reference, extractor, batch_size, cuda, True, verbose)
    statistics = fid_featuresdict_to_statistics(features, layer)
    if path is not None:
        save_statistics(path, key, statistics)
    return statistics


def save_statistics(path: str | Path, key: ReferenceKey, statistics: dict[str, np.ndarray]) -> None:
    """Store ``mu``, ``sigma`` and ``key`` as an ``.npz`` of plain arrays, atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, mu=statistics["mu"], sigma=statistics["sigma"], key=np.array(key.text()))
    atomic_write_bytes(path, buffer.getvalue())


def load_statistics(path: str | Path, key: ReferenceKey) -> dict[str, np.ndarray]:
    """The statistics stored at ``path`` for ``key``, checked; :class:`CorruptFileError` naming the file otherwise."""
    path = Path(path)
    data = read_regular_file(path, what=WHAT, max_bytes=MAX_BYTES)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except Exception as error:  # noqa: BLE001 (np.load fails in many ways on a foreign file; pickles are refused)
        raise _bad(path, f"it is not an .npz of plain arrays ({type(error).__name__}: {error})") from None
    if sorted(arrays) != ["key", "mu", "sigma"]:
        raise _bad(path, f"it holds the arrays {sorted(arrays)}, not key, mu and sigma")
    _check_key(path, arrays["key"], key)
    mu, sigma = arrays["mu"], arrays["sigma"]
    if mu.ndim != 1 or mu.size == 0 or sigma.shape != (mu.size, mu.size):
        raise _bad(path, f"mu has shape {mu.shape} and sigma {sigma.shape}; expected (D,) and (D, D)")
    if mu.dtype not in FLOATS or sigma.dtype not in FLOATS:
        raise _bad(path, f"mu is {mu.dtype} and sigma {sigma.dtype}; expected float32 or float64")
    if not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
        raise _bad(path, "mu or sigma holds NaN or infinite values")
    if not np.allclose(sigma, sigma.T, rtol=1e-5, atol=1e-8 * float(np.abs(sigma).max(initial=1.0))):
        raise _bad(path, "sigma is not symmetric, so it is no covariance")
    return {"mu": mu, "sigma": sigma}


def _check_key(path: Path, stored: np.ndarray, key: ReferenceKey) -> None:
    if stored.dtype.kind != "U" or stored.ndim != 0:
        raise _bad(path, f"its key is a {stored.dtype} array of shape {stored.shape}, not one text")
    if str(stored) != key.text():
        raise _bad(path, f"it was made for {str(stored)[:300]}, not for {key.text()}")


def _bad(path: Path, why: str) -> CorruptFileError:
    return CorruptFileError(f"{WHAT} {str(path)!r} cannot be used: {why}. Delete it: the statistics are "
                            "computed again from the real images and stored anew.")
