"""A digits classifier as the feature extractor of IS/FID on the embedded digits.

Inception-v3 (ImageNet) features need a weight file that cannot be downloaded here, and say
little about 8x8 handwritten digits anyway. :class:`DigitsClassifier` is a small CNN trained
on the digits' training split (deterministic, about ten seconds on a CPU, cached on disk);
its penultimate activations are the FID features and its logits the IS class predictions.
:class:`DigitsFeatureExtractor` registers it with torch-fidelity as ``"digits-classifier"``,
so ``torch_fidelity.calculate_metrics`` computes "digits-classifier IS/FID" exactly as it
computes Inception IS/FID. Its numbers are comparable between runs of this suite at the same
resolution, never with ImageNet Inception numbers.
"""
from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_fidelity.feature_extractor_base import FeatureExtractorBase

from evonorm_core.experiment.data import digits
from evonorm_core.experiment.files import CorruptFileError, load_checkpoint, require_keys, save_checkpoint

NAME = "digits-classifier"
FEATURES = ("features", "logits")
TRAIN_EPOCHS = 15
INPUT_SIZE = 16
TRAIN_SEED = 0


class DigitsClassifier(nn.Module):
    """uint8 greyscale (or RGB, averaged) images (N, C, R, R) -> (64 features, 10 logits).

    Images are resized to 16x16 (the digits are 8x8 at heart), then three 3x3 conv-BN-ReLU
    stages with 2x2 pooling at 16/32/64 channels, global average pooling, a 64-unit hidden
    layer (the FID features) and a linear classifier.
    """

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 1
        for width in (16, 32, 64):
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                       nn.MaxPool2d(2)]
            channels = width
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.hidden = nn.Linear(64, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        x = images.float().div(255.0)
        if x.shape[1] == 3:
            x = x.mean(1, keepdim=True)
        if x.shape[-1] != INPUT_SIZE:
            x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False, antialias=True)
        features = F.relu(self.hidden(self.body((x - 0.5) / 0.5)))
        return features, self.head(features)


def to_uint8(images01: Tensor) -> Tensor:
    return (images01 * 255).round().to(torch.uint8)


def cache_path(resolution: int) -> Path:
    """Where the classifier for ``resolution`` is cached, keyed by this module's source."""
    source = inspect.getsource(DigitsClassifier) + inspect.getsource(train_classifier)
    key = hashlib.sha256(f"{source}{resolution}{TRAIN_EPOCHS}{TRAIN_SEED}".encode()).hexdigest()[:12]
    root = Path(os.environ.get("EVONORM_CACHE_DIR", Path.home() / ".cache" / "evonorm_core"))
    return root / f"digits_classifier_{resolution}px_{key}.pt"


def train_classifier(resolution: int) -> tuple[DigitsClassifier, float]:
    """Train on the digits' training split (random shifts of up to 1/8 of the image); returns
    the classifier and its accuracy on the held-out split."""
    split = digits(resolution, channels=1)
    generator = torch.Generator().manual_seed(TRAIN_SEED)
    torch.manual_seed(TRAIN_SEED)
    model = DigitsClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    images, labels = to_uint8(split.train_images), split.train_labels
    shift = max(1, resolution // 16)
    for _ in range(TRAIN_EPOCHS):
        model.train()
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), 64):
            index = order[start:start + 64]
            dx, dy = (int(v) for v in torch.randint(-shift, shift + 1, (2,), generator=generator))
            batch = torch.roll(images[index], shifts=(dy, dx), dims=(2, 3))
            loss = F.cross_entropy(model(batch)[1], labels[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model.eval(), accuracy(model, to_uint8(split.val_images), split.val_labels)


@torch.no_grad()
def accuracy(model: DigitsClassifier, images: Tensor, labels: Tensor) -> float:
    model.eval()
    return float((model(images)[1].argmax(1) == labels).float().mean())


def weights_file(resolution: int) -> Path:
    """The cached classifier for ``resolution``, trained and cached on first use."""
    path = cache_path(resolution)
    if not path.exists():
        model, held_out = train_classifier(resolution)
        save_checkpoint(path, {"model": model.state_dict(), "resolution": resolution, "held_out_accuracy": held_out})
    return path


def checked_weights_file(path: str | Path, resolution: int) -> Path:
    """``path`` if it holds a classifier written by :func:`weights_file` for ``resolution`` px digits (a grid pins
    one so that every run is measured with the same scale); ``FileNotFoundError``/``ValueError`` saying what is
    wrong otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no digits classifier at {str(path)!r} (expected a file written by "
                                "evonorm_suite.gan.digits_classifier.weights_file)")
    state = load_checkpoint(path, what="digits classifier")
    require_keys(state, ("model", "resolution"), path, what="digits classifier")
    if state["resolution"] != resolution:
        raise ValueError(f"the digits classifier {str(path)!r} was trained on {state['resolution']} px digits, "
                         f"the run's images are {resolution} px")
    _fitted(state, path)
    return path


def load_classifier(path: str | Path) -> DigitsClassifier:
    """A classifier saved by :func:`weights_file` (loaded with ``weights_only=True``); :class:`CorruptFileError`
    naming the file if its weights are not this classifier's."""
    state = load_checkpoint(path, what="digits classifier")
    require_keys(state, ("model",), path, what="digits classifier")
    return _fitted(state, path)


def _fitted(state: dict, path: str | Path) -> DigitsClassifier:
    model = DigitsClassifier()
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, TypeError) as error:  # another layout: missing, unexpected or reshaped weights
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise CorruptFileError(f"digits classifier {str(path)!r} holds weights of another classifier "
                               f"({lines[-1].rstrip('.')}): delete it, or give a file this version wrote") from None
    return model.eval()


class DigitsFeatureExtractor(FeatureExtractorBase):
    """torch-fidelity's view of :class:`DigitsClassifier`: ``features`` (64-d, FID) and ``logits`` (IS).

    ``feature_extractor_weights_path`` is the classifier file of :func:`weights_file`
    (:func:`evonorm_suite.gan.metrics.fidelity_metrics` passes it).
    """

    def __init__(self, name: str, features_list, feature_extractor_weights_path: str | None = None, **kwargs) -> None:
        super().__init__(name, features_list)
        if feature_extractor_weights_path is None:
            raise ValueError("the digits-classifier feature extractor needs feature_extractor_weights_path "
                             "(evonorm_suite.gan.digits_classifier.weights_file(resolution))")
        self.model = load_classifier(feature_extractor_weights_path)

    @staticmethod
    def get_provided_features_list():
        return FEATURES

    @staticmethod
    def get_default_feature_layer_for_metric(metric):
        return {"isc": "logits", "fid": "features", "kid": "features", "prc": "features"}[metric]

    @staticmethod
    def can_be_compiled():
        return False

    @staticmethod
    def get_dummy_input_for_compile():
        return torch.zeros(1, 1, 32, 32, dtype=torch.uint8)

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        features, logits = self.model(images)
        out = {"features": features, "logits": logits}
        return tuple(out[name] for name in self.features_list)
