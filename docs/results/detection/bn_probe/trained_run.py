"""The probes' common start: a finished detection run's config and trained model (one thread, datasets registered).

Run the probes as files (``python docs/results/detection/bn_probe/<probe>.py``): this folder is then on the path.
"""
import torch

from evonorm_suite.detection import load_config
from evonorm_suite.detection.checkpoint import SafeCheckpointer
from evonorm_suite.detection.data import prepare_datasets
from evonorm_suite.detection.trainer import NormActTrainer


def load_trained(run: str, output_dir: str):
    """``(cfg, model)`` of the run in folder ``run`` with its ``model_final.pth``, writing to ``output_dir``."""
    torch.set_num_threads(1)
    cfg = load_config(f"{run}/config.yaml", ["MODEL.WEIGHTS", f"{run}/model_final.pth", "OUTPUT_DIR", output_dir])
    cfg.freeze()
    prepare_datasets(cfg)
    model = NormActTrainer.build_model(cfg)
    SafeCheckpointer(model).load(cfg.MODEL.WEIGHTS)
    return cfg, model
