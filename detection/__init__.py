"""EvoNorm layers in Detectron2's Mask R-CNN (paper Sec. 5.4, Table 4).

Importing this package registers ``build_norm_act_resnet_fpn_backbone`` (BACKBONE_REGISTRY),
``NormActConvFCHead`` (ROI_BOX_HEAD_REGISTRY) and ``NormActMaskHead``
(ROI_MASK_HEAD_REGISTRY); :func:`add_evonorm_config` adds their config keys.
"""
from evonorm_core.experiment.library_warnings import ignore_jit_script_deprecation

ignore_jit_script_deprecation()  # before detectron2's first import, in the modules below

from evonorm_suite.detection.backbone import build_norm_act_resnet_fpn_backbone  # noqa: E402
from evonorm_suite.detection.config import add_evonorm_config, load_config  # noqa: E402
from evonorm_suite.detection.heads import NormActConvFCHead, NormActMaskHead  # noqa: E402

__all__ = [
    "NormActConvFCHead",
    "NormActMaskHead",
    "add_evonorm_config",
    "build_norm_act_resnet_fpn_backbone",
    "load_config",
]
