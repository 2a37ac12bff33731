"""detectron2's ``DefaultTrainer`` with this project's optimizer, data pipeline and COCO evaluation.

It keeps everything else of ``DefaultTrainer``: checkpointing and resume, the LR schedule,
progress lines with ETA (``CommonMetricPrinter``), TensorBoard scalars, metrics.json, and
evaluation at ``TEST.EVAL_PERIOD`` and after the last iteration.
"""
from __future__ import annotations

import os

from detectron2.engine import DefaultTrainer
from detectron2.evaluation import COCOEvaluator

from evonorm_suite.detection import data, optimizer
from evonorm_suite.detection.checkpoint import SafeCheckpointer


class NormActTrainer(DefaultTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        # The same object the checkpoint hook holds, loading safely and saving atomically.
        self.checkpointer.__class__ = SafeCheckpointer

    @classmethod
    def build_optimizer(cls, cfg, model):
        return optimizer.build_optimizer(cfg, model)

    @classmethod
    def build_train_loader(cls, cfg):
        return data.build_train_loader(cfg)

    @classmethod
    def build_evaluator(cls, cfg, dataset_name: str):
        return COCOEvaluator(dataset_name, output_dir=os.path.join(cfg.OUTPUT_DIR, "inference", dataset_name))
