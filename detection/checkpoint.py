"""detectron2's checkpointer without code from files and without torn files.

:class:`SafeCheckpointer` is ``DetectionCheckpointer`` with

* loading through :func:`evonorm_core.experiment.files.load_checkpoint` (``torch.load`` with
  ``weights_only=True``; a truncated or foreign file is a :class:`CorruptFileError` naming it);
* Python pickles refused: ``.pkl`` (Detectron2/Caffe2 model-zoo format) and ``.pyth`` (pycls)
  files are unpickled by detectron2 with ``pickle.load``, which runs any code the file holds;
* saving atomically (write, fsync, rename), the ``last_checkpoint`` tag included, so a kill
  leaves the previous checkpoint or the new one, never half of one.
"""
from __future__ import annotations

import os

from detectron2.checkpoint import DetectionCheckpointer

from evonorm_core.experiment.files import CorruptFileError, atomic_write_text, load_checkpoint, save_checkpoint

PICKLE_SUFFIXES = (".pkl", ".pyth")
LAST_CHECKPOINT = "last_checkpoint"  # fvcore's tag file: the name of a run's newest checkpoint


class UnsafeWeightsError(CorruptFileError):
    """A weight file in a format that is read by unpickling arbitrary objects."""


def check_weights_file(path: str) -> None:
    """Refuse ``path`` (``MODEL.WEIGHTS``) if it is a Python pickle, missing, truncated or not a
    plain-data PyTorch checkpoint; the message names the file and what to do."""
    if path.endswith(PICKLE_SUFFIXES):
        raise UnsafeWeightsError(
            f"MODEL.WEIGHTS {path!r} is a Python pickle ({os.path.splitext(path)[1]}); it is refused because "
            "unpickling runs any code the file holds. Use a .pth checkpoint written by torch.save (plain tensors), "
            "e.g. converted once from a trusted copy with torch.save({'model': state_dict}, 'weights.pth')"
        )
    load_checkpoint(path, what="MODEL.WEIGHTS")


class SafeCheckpointer(DetectionCheckpointer):
    def _load_file(self, filename: str):
        if filename.endswith(PICKLE_SUFFIXES):
            check_weights_file(filename)  # raises
        return super()._load_file(filename)  # .pth: self._torch_load, below

    def _torch_load(self, f: str):
        return load_checkpoint(f, what="detectron2 checkpoint")

    def get_checkpoint_file(self) -> str:
        """The checkpoint ``last_checkpoint`` names; :class:`CorruptFileError` if it names no file (fvcore would
        assert inside the worker)."""
        path = super().get_checkpoint_file()
        if not os.path.isfile(path):
            tag = os.path.join(self.save_dir, LAST_CHECKPOINT)
            raise CorruptFileError(
                f"{tag!r} names {path!r}, which does not exist: write the name of a checkpoint in that folder into it "
                "(e.g. model_0000999.pth) to resume from there, or delete it to start from MODEL.WEIGHTS")
        return path

    def save(self, name: str, **kwargs) -> None:
        if not self.save_dir or not self.save_to_disk:
            return
        data = {"model": self.model.state_dict()}
        for key, obj in self.checkpointables.items():
            data[key] = obj.state_dict()
        data.update(kwargs)
        basename = f"{name}.pth"
        self.logger.info(f"Saving checkpoint to {os.path.join(self.save_dir, basename)}")
        save_checkpoint(os.path.join(self.save_dir, basename), data)
        self.tag_last_checkpoint(basename)

    def tag_last_checkpoint(self, last_filename_basename: str) -> None:
        atomic_write_text(os.path.join(self.save_dir, LAST_CHECKPOINT), last_filename_basename)
