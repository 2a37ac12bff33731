"""Inception Score and FID of a generator with torch-fidelity, fully offline.

torch-fidelity downloads its Inception weights on first use; here they must be a local
file (``--inception-weights``, or torch-fidelity's file name in
``$TORCH_HOME/hub/checkpoints/``). :func:`find_inception_weights` says so clearly when it
is missing. Class labels are sampled here (:class:`GeneratorSampler` reports
``num_classes = 0`` to torch-fidelity, whose own conditional path uses ``np.int`` and
fails on current NumPy). Reference statistics of the real data are cached by
torch-fidelity under ``cache_root`` with a name that identifies the data.
"""
from __future__ import annotations

import os

import torch
import torch_fidelity
from torch import Tensor, nn
from torch.utils.data import Dataset
from torch_fidelity.generative_model_base import GenerativeModelBase

from .data import to_uint8

INCEPTION = "inception-v3-compat"
INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"


class InceptionWeightsMissing(FileNotFoundError):
    """Real IS/FID need torch-fidelity's Inception weights as a local file."""


def find_inception_weights(path: str | None = None) -> str:
    """The Inception weight file to use: ``path`` or torch hub's cached copy; raises if neither exists."""
    candidate = path or os.path.join(torch.hub.get_dir(), "checkpoints", INCEPTION_FILE)
    if os.path.isfile(candidate):
        return candidate
    raise InceptionWeightsMissing(
        f"Inception weights not found at {candidate!r}. Real IS/FID need torch-fidelity's "
        f"{INCEPTION_FILE} (github.com/toshas/torch-fidelity/releases, v0.2.0), which cannot be "
        f"downloaded here: pass --inception-weights PATH or place it in {torch.hub.get_dir()}/checkpoints/."
    )


class GeneratorSampler(GenerativeModelBase):
    """A class-conditional generator as torch-fidelity's unconditional model: ``z -> uint8 images``.

    Labels are drawn uniformly from the generator's classes with a seeded RNG, so a call
    with the same ``seed`` reproduces the same samples.
    """

    def __init__(self, generator: nn.Module, seed: int = 0) -> None:
        super().__init__()
        self.generator = generator.eval()
        self.label_rng = torch.Generator().manual_seed(seed)

    @property
    def z_size(self) -> int:
        return self.generator.spec.dim_z

    @property
    def z_type(self) -> str:
        return "normal"

    @property
    def num_classes(self) -> int:
        return 0  # labels are sampled in forward

    @torch.no_grad()
    def forward(self, z: Tensor) -> Tensor:
        y = torch.randint(self.generator.spec.num_classes, (len(z),), generator=self.label_rng).to(z.device)
        return to_uint8(self.generator(z, y))


def fidelity_metrics(
    generated: GeneratorSampler | Dataset,
    reference: Dataset,
    num_samples: int,
    feature_extractor: str = INCEPTION,
    weights_path: str | None = None,
    reference_cache_name: str | None = None,
    cache_root: str | None = None,
    batch_size: int = 64,
    seed: int = 2020,
    verbose: bool = False,
) -> dict[str, float]:
    """IS of ``generated`` and FID between it and ``reference`` (both give uint8 NCHW images).

    ``feature_extractor`` is a torch-fidelity registered name; Inception needs
    ``weights_path``. ``cache_root=None`` is torch-fidelity's ``$TORCH_HOME/fidelity_cache``;
    ``verbose`` shows its progress bars. Returns ``is_mean``, ``is_std`` and ``fid``.
    """
    options = dict(
        input1=generated,
        input2=reference,
        isc=True,
        fid=True,
        feature_extractor=feature_extractor,
        input1_model_num_samples=num_samples,
        input2_cache_name=reference_cache_name,
        cache=reference_cache_name is not None,
        cache_root=cache_root,
        cuda=torch.cuda.is_available(),
        batch_size=batch_size,
        rng_seed=seed,
        save_cpu_ram=True,
        verbose=verbose,
    )
    if weights_path is not None:
        options["feature_extractor_weights_path"] = weights_path
    result = torch_fidelity.calculate_metrics(**options)
    return {
        "is_mean": float(result["inception_score_mean"]),
        "is_std": float(result["inception_score_std"]),
        "fid": float(result["frechet_inception_distance"]),
    }
