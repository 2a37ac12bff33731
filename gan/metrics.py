"""Inception Score and FID of a generator with torch-fidelity, fully offline.

Two feature extractors:

* ``inception-v3-compat``, the standard ImageNet metric. torch-fidelity downloads its
  weights on first use; here they must be a local file (``--inception-weights``, or
  torch-fidelity's file name in ``$TORCH_HOME/hub/checkpoints/``), and the file is checked
  against the SHA-256 prefix in its name before torch-fidelity unpickles it;
* ``digits-classifier`` (:mod:`evonorm_suite.gan.digits_classifier`), for the embedded digits: "digits-
  classifier IS/FID", comparable between runs here, never with Inception numbers.

Class labels are sampled here (:class:`GeneratorSampler` reports ``num_classes = 0`` to
torch-fidelity, whose own conditional path uses ``np.int`` and fails on current NumPy).
torch-fidelity's feature extractors, feature extraction and IS/FID formulas are used, never
its cache (pickles it unpickles): the reference statistics of the real data are the suite's,
stored as plain arrays under ``cache_root`` (:mod:`evonorm_suite.gan.reference_statistics`).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset
from torch_fidelity.generative_model_base import GenerativeModelBase
from torch_fidelity.metric_fid import fid_featuresdict_to_statistics, fid_statistics_to_metric
from torch_fidelity.metric_isc import isc_featuresdict_to_metric
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY, register_feature_extractor
from torch_fidelity.utils import (
    create_feature_extractor,
    get_featuresdict_from_dataset,
    get_featuresdict_from_generative_model,
    resolve_feature_layer_for_metric,
)

from evonorm_suite.gan import digits_classifier
from evonorm_suite.gan.data import UInt8Images, digits_dataset, to_uint8
from evonorm_suite.gan.reference_statistics import ReferenceKey, reference_statistics, weights_digest

INCEPTION = "inception-v3-compat"
DIGITS = digits_classifier.NAME
INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
INCEPTION_SHA256_PREFIX = "6726825d"  # torch.hub's convention: the file name ends with its hash's prefix
if digits_classifier.NAME not in FEATURE_EXTRACTORS_REGISTRY:
    register_feature_extractor(digits_classifier.NAME, digits_classifier.DigitsFeatureExtractor)


class InceptionWeightsMissing(FileNotFoundError):
    """Real IS/FID need torch-fidelity's Inception weights as a local file."""


def find_inception_weights(path: str | None = None) -> str:
    """The Inception weight file to use: ``path`` or torch hub's cached copy, after checking
    that it is torch-fidelity's file (its SHA-256); raises if neither exists or it is another file."""
    candidate = path or os.path.join(torch.hub.get_dir(), "checkpoints", INCEPTION_FILE)
    if os.path.isfile(candidate):
        digest = weights_digest(candidate)
        if not digest.startswith(INCEPTION_SHA256_PREFIX):
            raise InceptionWeightsMissing(
                f"{candidate!r} is not torch-fidelity's {INCEPTION_FILE} (SHA-256 {digest[:16]}..., expected "
                f"{INCEPTION_SHA256_PREFIX}...); it is refused because torch-fidelity unpickles it with "
                "weights_only=False, which would run any code in a foreign file"
            )
        try:  # the 32-bit name prefix can be forged: also require plain data before torch-fidelity unpickles it
            torch.load(candidate, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001 (any failure means: not the plain state dict expected)
            raise InceptionWeightsMissing(
                f"{candidate!r} matches the SHA-256 prefix of {INCEPTION_FILE} but does not load as plain tensors "
                f"({type(error).__name__}); it is refused because torch-fidelity unpickles it with weights_only=False"
            ) from None
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
    ``weights_path``. ``reference_cache_name`` names the reference images: their statistics are
    then stored under ``cache_root`` (default ``~/.cache/evonorm_core/fid_reference``) and read
    back checked (:mod:`evonorm_suite.gan.reference_statistics`); ``None``: computed every time.
    ``seed`` draws the latents and shuffles the IS splits, as torch-fidelity's ``rng_seed``;
    ``verbose`` shows its progress bars. Returns ``is_mean``, ``is_std`` and ``fid``.
    """
    cuda = torch.cuda.is_available()
    layer_is, layer_fid = (resolve_feature_layer_for_metric(m, feature_extractor=feature_extractor) for m in ("isc", "fid"))
    options = {} if weights_path is None else {"feature_extractor_weights_path": weights_path}
    extractor = create_feature_extractor(feature_extractor, sorted({layer_is, layer_fid}), cuda=cuda, verbose=verbose,
                                         **options)
    if isinstance(generated, GenerativeModelBase):
        features = get_featuresdict_from_generative_model(generated, extractor, num_samples, batch_size, cuda, seed,
                                                          verbose)
    else:
        features = get_featuresdict_from_dataset(generated, extractor, batch_size, cuda, True, verbose)
    inception = isc_featuresdict_to_metric(features, layer_is, rng_seed=seed, verbose=verbose)
    key = None if reference_cache_name is None else ReferenceKey(
        reference_cache_name, len(reference), feature_extractor, layer_fid, weights_digest(weights_path))
    stored = reference_statistics(reference, extractor, layer_fid, key, cache_root, batch_size, cuda, verbose)
    ours = fid_featuresdict_to_statistics(features, layer_fid)
    if stored["mu"].shape != ours["mu"].shape:
        raise ValueError(f"the reference statistics have {stored['mu'].size} features, the {feature_extractor!r} "
                         f"extractor's {layer_fid!r} layer gives {ours['mu'].size}")
    theirs = {name: stored[name].astype(ours[name].dtype, copy=False) for name in ("mu", "sigma")}
    fid = fid_statistics_to_metric(ours, theirs, verbose)
    return {
        "is_mean": float(inception["inception_score_mean"]),
        "is_std": float(inception["inception_score_std"]),
        "fid": float(fid["frechet_inception_distance"]),
    }


def digits_fidelity(generator: nn.Module, resolution: int, num_samples: int, seed: int = 0,
                    cache_root: str | None = None) -> dict[str, float]:
    """Digits-classifier IS/FID of ``generator`` against the digits' training split (see
    :mod:`evonorm_suite.gan.digits_classifier`; FID floor and noise ceiling in docs/gan.md)."""
    weights = digits_classifier.weights_file(resolution)
    reference = UInt8Images(digits_dataset(resolution, "train"))
    metrics = fidelity_metrics(
        GeneratorSampler(generator, seed), reference, num_samples, feature_extractor=DIGITS, weights_path=str(weights),
        reference_cache_name=f"digits-train-{resolution}px-{weights.stem}", cache_root=cache_root, seed=seed + 2020,
        batch_size=250,
    )
    accuracy = class_accuracy(generator, digits_classifier.load_classifier(weights), num_samples, seed)
    return {"is_mean": metrics["is_mean"], "fid": metrics["fid"], "class_accuracy": accuracy}


@torch.no_grad()
def class_accuracy(generator: nn.Module, classifier: nn.Module, num_samples: int, seed: int = 0) -> float:
    """The fraction of ``num_samples`` class-conditional samples (classes in turn) that the
    digits classifier assigns to the class they were drawn for (chance: 1 / classes)."""
    generator.eval()
    z_rng = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_samples) % generator.spec.num_classes
    z = torch.randn(num_samples, generator.spec.dim_z, generator=z_rng)
    return digits_classifier.accuracy(classifier, to_uint8(generator(z, labels)), labels)


class _NoiseImages(Dataset):
    """``count`` uniform-noise uint8 images (C, R, R), seeded: the FID ceiling."""

    def __init__(self, count: int, channels: int, resolution: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (count, channels, resolution, resolution), dtype=torch.uint8,
                                    generator=generator)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Tensor:
        return self.images[index]


def digits_calibration(resolution: int, cache_root: str | None = None,
                       weights: str | Path | None = None) -> dict[str, float]:
    """The scale of digits-classifier IS/FID: the held-out real digits against the training
    digits (the floor a perfect generator reaches with as many samples) and uniform noise
    (the ceiling), each with as many images as the held-out split has; measured with the
    classifier file ``weights`` (default: the cached one of :func:`digits_classifier.weights_file`)."""
    weights = str(weights or digits_classifier.weights_file(resolution))
    reference = UInt8Images(digits_dataset(resolution, "train"))
    held_out = UInt8Images(digits_dataset(resolution, "val"))
    common = dict(feature_extractor=DIGITS, weights_path=weights, cache_root=cache_root,
                  reference_cache_name=f"digits-train-{resolution}px-{Path(weights).stem}", batch_size=250)
    real = fidelity_metrics(held_out, reference, len(held_out), **common)
    noise = fidelity_metrics(_NoiseImages(len(held_out), 1, resolution), reference, len(held_out), **common)
    return {"fid_floor": real["fid"], "is_real": real["is_mean"], "fid_noise": noise["fid"], "is_noise": noise["is_mean"],
            "samples": len(held_out), "reference_images": len(reference)}
