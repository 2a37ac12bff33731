"""EvoNorm layers in Detectron2's Mask R-CNN (paper Sec. 5.4, Table 4).

Importing this package registers ``build_norm_act_resnet_fpn_backbone`` (BACKBONE_REGISTRY),
``NormActConvFCHead`` (ROI_BOX_HEAD_REGISTRY) and ``NormActMaskHead``
(ROI_MASK_HEAD_REGISTRY); :func:`add_evonorm_config` adds their config keys.
"""
import warnings

# detectron2 decorates helpers with torch.jit.script at import time, which torch 2.14 flags
# as deprecated on every command; the warning is about detectron2's code, not the user's.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)

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
