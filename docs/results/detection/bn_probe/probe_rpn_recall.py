"""Probe (not a result): on the validation images (eval mode), the share of ground-truth boxes that a trained
detector's RPN proposals (POST_NMS_TOPK_TEST per image) and its final detections overlap by IoU >= t.

    python probe_rpn_recall.py RUN_DIR
"""
import json
import sys

import torch
from detectron2.data import DatasetCatalog, detection_utils
from detectron2.structures import Boxes, BoxMode, pairwise_iou
from trained_run import load_trained

run = sys.argv[1]
cfg, model = load_trained(run, "/tmp/probe/out")
model.eval()
dataset = cfg.DATASETS.TEST[0]
records = DatasetCatalog.get(dataset)
found = {0.5: 0, 0.7: 0, 0.9: 0}
found_det = {0.5: 0, 0.7: 0}
gts = 0
with torch.no_grad():
    for record in records:
        image = detection_utils.read_image(record["file_name"], format=cfg.INPUT.FORMAT)
        tensor = torch.as_tensor(image.transpose(2, 0, 1).copy()).float()
        inputs = [{"image": tensor, "height": image.shape[0], "width": image.shape[1]}]
        images = model.preprocess_image(inputs)
        features = model.backbone(images.tensor)
        proposals, _ = model.proposal_generator(images, features, None)
        gt = Boxes(torch.tensor([BoxMode.convert(a["bbox"], a["bbox_mode"], BoxMode.XYXY_ABS) for a in record["annotations"]],
                                dtype=torch.float32))
        gts += len(gt)
        iou = pairwise_iou(gt, proposals[0].proposal_boxes).max(dim=1).values
        for t in found:
            found[t] += int((iou >= t).sum())
        detections = model(inputs)[0]["instances"]
        iou_d = pairwise_iou(gt, detections.pred_boxes).max(dim=1).values if len(detections) else torch.zeros(len(gt))
        for t in found_det:
            found_det[t] += int((iou_d >= t).sum())
print(json.dumps({"run": run, "gt_boxes": gts, "proposals_per_image": cfg.MODEL.RPN.POST_NMS_TOPK_TEST,
                  "proposal_recall": {str(t): round(found[t] / gts, 3) for t in found},
                  "detection_recall": {str(t): round(found_det[t] / gts, 3) for t in found_det}}))
