"""Do two CUDA training runs from one seed end with the same weights, with and without --deterministic?

The control behind ``classification/train.py --deterministic`` and the CUDA case of
tests/test_classification_train.py::test_resume_continues_schedule_and_weights_exactly: the test's
eight-step run (MobileNetV2-CIFAR, 8 px digits, batch 16) twice per setting and layer, then the
largest weight difference between the pair. Run on a GPU machine from the repository root:
``python docs/results/gpu/determinism_probe.py OUT.json``.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from evonorm_core.experiment.files import load_checkpoint
from evonorm_suite.classification.train import TrainConfig, train


def final_weights(folder: Path, norm_act: str, deterministic: bool) -> dict:
    config = TrainConfig(model="mobilenetv2_cifar", norm_act=norm_act, image_size=8, train_subset=64, batch_size=16,
                         epochs=2, base_lr=0.4, warmup_epochs=0, schedule="cosine", output_dir=str(folder),
                         progress=False, deterministic=deterministic)
    train(config)
    return load_checkpoint(folder / "checkpoint.pt")["model"]


def main(out: str) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for norm_act in ("evonorm_s0", "bn_relu"):
            for deterministic in (False, True):
                first, second = (final_weights(Path(scratch) / f"{norm_act}_{deterministic}_{i}", norm_act,
                                               deterministic) for i in range(2))
                floats = [name for name, t in first.items() if t.is_floating_point()]
                differing = [name for name in floats if not torch.equal(first[name], second[name])]
                largest = max((float((first[n] - second[n]).abs().max()) for n in floats), default=0.0)
                rows.append({"norm_act": norm_act, "deterministic": deterministic, "tensors": len(floats),
                             "differing_tensors": len(differing), "largest_abs_difference": largest})
                print(rows[-1], flush=True)
    Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
                                     "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
