"""detectron2's ``DefaultTrainer`` with this project's optimizer, data pipeline, COCO evaluation and
``TEST.PRECISE_BN`` for the suite's batch-statistics layers.

It keeps everything else of ``DefaultTrainer``: checkpointing and resume, the LR schedule,
progress lines with ETA (``CommonMetricPrinter``), TensorBoard scalars, metrics.json, and
evaluation at ``TEST.EVAL_PERIOD`` and after the last iteration.
"""
from __future__ import annotations

import itertools
import logging
import os

from detectron2.engine import DefaultTrainer, hooks
from detectron2.evaluation import COCOEvaluator

from evonorm_core import running_stats
from evonorm_core.experiment.stopping import stop_signals_after_block
from evonorm_suite.detection import data, optimizer
from evonorm_suite.detection.checkpoint import SafeCheckpointer

# a child of detectron2's logger: default_setup writes that one to OUTPUT_DIR/log.txt
logger = logging.getLogger(f"detectron2.{__name__}")


class PreciseBatchStatistics(hooks.HookBase):
    """``TEST.PRECISE_BN`` for every layer with moving averages: the suite's BN and EvoNorm-B layers
    as well as ``nn.BatchNorm`` (detectron2's ``PreciseBN`` finds ``nn.BatchNorm`` modules only, so
    with the suite's layers it switched itself off with one info line).

    Every ``period`` iterations (0: never) and after the last one, before the checkpoint and the
    evaluation of that iteration, the moving averages become the plain average over ``num_iter``
    training batches (:func:`evonorm_core.running_stats.recalibrate`: the model runs in eval mode,
    so the heads see the proposals evaluation sees, with only the batch-statistics layers
    collecting; detectron2's hook runs the training forward instead).
    """

    def __init__(self, period: int, model, data_loader, num_iter: int) -> None:
        self._period, self._model, self._data_loader, self._num_iter = period, model, data_loader, num_iter
        self._batches = None

    def after_step(self) -> None:
        next_iter = self.trainer.iter + 1
        if next_iter == self.trainer.max_iter or (self._period > 0 and next_iter % self._period == 0):
            self.update_stats()

    def update_stats(self) -> int:
        """Recompute the moving averages now; returns the number of layers recomputed."""
        if self._batches is None:  # one iterator for every call, as detectron2's hook
            self._batches = iter(self._data_loader)
        layers = running_stats.recalibrate(self._model, itertools.islice(self._batches, self._num_iter))
        logger.info("precise batch statistics: the moving averages of %d layers recomputed over %d batches",
                    layers, self._num_iter)
        return layers


def stop_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The stop signal's ``KeyboardInterrupt`` that ``error`` was raised while handling, if any (detectron2 runs
    the hooks' ``after_train`` in a ``finally``)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, KeyboardInterrupt):
        cause = cause.__context__
    return cause


class NormActTrainer(DefaultTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        # The same object the checkpoint hook holds, loading safely and saving atomically.
        self.checkpointer.__class__ = SafeCheckpointer
        self.completed_iter: int | None = None  # the last iteration whose step (forward, backward, update) ended

    def run_step(self) -> None:
        """One iteration; a stop signal waits for it to end (a stop inside would leave the model half updated)."""
        with stop_signals_after_block():
            super().run_step()
            self.completed_iter = self.iter

    def train(self):
        """DefaultTrainer's training; a stop signal (SIGINT, SIGTERM) first saves the model at the last finished
        iteration, so that ``--resume`` loses none (the periodic checkpoint may lie ``CHECKPOINT_PERIOD`` back).
        A stop stays a stop when the end-of-training hooks then fail (a signal inside a hook can leave it broken,
        e.g. a lazy import of TensorBoard cut short)."""
        try:
            return super().train()
        except KeyboardInterrupt:
            self.save_stopped()
            raise
        except Exception as error:
            stop = stop_behind(error)
            if stop is None:
                raise
            logger.warning("stopping: the end-of-training hooks failed (%s: %s)", type(error).__name__, error)
            self.save_stopped()
            raise stop from None

    def save_stopped(self) -> None:
        """Checkpoint the last finished iteration as the periodic checkpointer does (``model_N.pth`` tagged as
        the last checkpoint); its LR schedule is stepped for that iteration if the stop came before it was."""
        done = self.completed_iter
        if done is None:
            return  # no iteration ended in this process: its starting checkpoint holds everything
        if self.scheduler.last_epoch == done:  # the LRScheduler hook had not run for it yet
            self.scheduler.step()
        self.checkpointer.save(f"model_{done:07d}", iteration=done)
        logger.info("stopped: saved the model after iteration %d; --resume continues from iteration %d", done,
                    done + 1)

    def build_hooks(self) -> list[hooks.HookBase]:
        """DefaultTrainer's hooks, with :class:`PreciseBatchStatistics` in place of its ``PreciseBN``
        (right after the LR scheduler, so before the checkpoint and the evaluation) when
        ``TEST.PRECISE_BN.ENABLED``, and the periodic checkpointer keeping ``SOLVER.CHECKPOINTS_KEPT``
        checkpoints (0: all)."""
        built = [hook for hook in super().build_hooks() if not isinstance(hook, hooks.PreciseBN)]
        for hook in built:
            if isinstance(hook, hooks.PeriodicCheckpointer) and self.cfg.SOLVER.CHECKPOINTS_KEPT > 0:
                hook.max_to_keep = self.cfg.SOLVER.CHECKPOINTS_KEPT
        if self.cfg.TEST.PRECISE_BN.ENABLED:
            after = next(i for i, hook in enumerate(built) if isinstance(hook, hooks.LRScheduler)) + 1
            built.insert(after, PreciseBatchStatistics(self.cfg.TEST.EVAL_PERIOD, self.model,
                                                       self.build_train_loader(self.cfg),
                                                       self.cfg.TEST.PRECISE_BN.NUM_ITER))
        return built

    @classmethod
    def build_optimizer(cls, cfg, model):
        return optimizer.build_optimizer(cfg, model)

    @classmethod
    def build_train_loader(cls, cfg):
        return data.build_train_loader(cfg)

    @classmethod
    def build_evaluator(cls, cfg, dataset_name: str):
        return COCOEvaluator(dataset_name, output_dir=os.path.join(cfg.OUTPUT_DIR, "inference", dataset_name))
