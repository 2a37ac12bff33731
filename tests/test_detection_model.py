"""Mask R-CNN with norm-act layers: configs, placement, parameter counts, empty RoIs, optimizer."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("detectron2", reason="detectron2 is not installed (tools/install.sh installs it)")
pytestmark = pytest.mark.detectron2

from detectron2.layers import Conv2d  # noqa: E402
from detectron2.modeling import build_model  # noqa: E402
from detectron2.structures import BitMasks, Boxes, Instances  # noqa: E402
from detectron2.utils.events import EventStorage  # noqa: E402
from torch import nn  # noqa: E402

from detection import load_config  # noqa: E402
from detection.norm import EmptyBatchSafe  # noqa: E402
from detection.optimizer import optimizer_param_groups  # noqa: E402
from detection.paper import CONFIG_ROWS, TABLE4  # noqa: E402
from evonorm_core import build_norm_act  # noqa: E402
from evonorm_core.layers import NormAct2d  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "detection" / "configs"
PAPER_CONFIGS = sorted(CONFIG_ROWS)
DEMO_CONFIGS = ["demo_shapes_gn", "demo_shapes_evonorm_s0", "demo_shapes_evonorm_b0"]
# The demo model at a quarter of its width, for quick forward/backward checks.
TINY = [
    "MODEL.RESNETS.STEM_OUT_CHANNELS", "16", "MODEL.RESNETS.RES2_OUT_CHANNELS", "16", "MODEL.FPN.OUT_CHANNELS", "16",
    "MODEL.ROI_BOX_HEAD.CONV_DIM", "16", "MODEL.ROI_BOX_HEAD.FC_DIM", "32", "MODEL.ROI_MASK_HEAD.CONV_DIM", "16",
    "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "16", "MODEL.RPN.POST_NMS_TOPK_TRAIN", "50",
]
LAYER_OF = {"bn": "BatchNormAct2d", "gn": "GroupNormAct2d", "evonorm_b0": "EvoNormB0", "evonorm_s0": "EvoNormS0"}


def config(name: str, *opts):
    return load_config(str(CONFIGS / f"{name}.yaml"), ["MODEL.DEVICE", "cpu", *opts])


_models: dict[str, nn.Module] = {}


def paper_model(name: str) -> nn.Module:
    if name not in _models:
        _models[name] = build_model(config(name))
    return _models[name]


def norm_of(conv: Conv2d) -> nn.Module:
    return conv.norm.layer if isinstance(conv.norm, EmptyBatchSafe) else conv.norm


def expected_placement(model: nn.Module) -> dict[str, bool]:
    """Conv name -> nonlinearity its norm must have, following the paper / TF reference placement."""
    expected = {}
    for name, module in model.named_modules():
        if not isinstance(module, Conv2d) or name.endswith("predictor"):
            continue  # no norm in the predictors (nn.Conv2d/ConvTranspose2d, not detectron2's Conv2d)
        if name.startswith("backbone.bottom_up"):  # stem conv1, block conv1/conv2 with; conv3/shortcut without
            expected[name] = name.rsplit(".", 1)[-1] in ("conv1", "conv2")
        elif name.startswith("backbone.fpn_"):
            expected[name] = False
        elif name.startswith(("roi_heads.box_head", "roi_heads.mask_head", "proposal_generator.rpn_head")):
            expected[name] = True
    return expected


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_config_places_norm_act_everywhere(name):
    model = paper_model(name)
    layer = LAYER_OF[name.split("_", 3)[-1]]
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.SyncBatchNorm)) for m in model.modules())
    placement = expected_placement(model)
    assert len(placement) == (53 if "R50" in name else 104) + 8 + 1 + 4 + 4  # backbone + FPN + RPN + box + mask
    assert placement["proposal_generator.rpn_head.conv"] is True
    for conv_name, nonlinearity in placement.items():
        conv = model.get_submodule(conv_name)
        norm = norm_of(conv)
        assert type(norm).__name__ == layer, conv_name
        assert norm.nonlinearity is nonlinearity, conv_name
        assert norm.eps == 1e-5, f"{conv_name}: eps {norm.eps}, the paper's layers use 1e-5"
        assert conv.activation is None, f"{conv_name}: separate activation after the norm-act"
        assert conv.bias is None, conv_name
    for head in (model.roi_heads.box_head, model.roi_heads.mask_head):
        children = list(head.children())
        for before, after in zip(children, children[1:]):
            assert not (isinstance(before, Conv2d) and isinstance(after, nn.ReLU)), f"ReLU after a norm-act in {head}"
    if name.endswith(("_bn", "_evonorm_b0")):
        assert all(norm_of(model.get_submodule(c)).sync for c in placement), "batch statistics must be synchronized"


# NeurIPS appendix C, "Instance Segmentation on COCO": "8 workers with 8 images/worker ... 1024 x 1024 ...
# from scratch for 135K steps using SGD with momentum 0.9, weight decay 4e-5 and an initial learning rate
# of 0.1, which is reduced by 10x at step 120K and step 125K"; section 5.1: "32 groups for grouped
# aggregation ops"; Table 4's BN-ReLU/EvoNorm-B0 rows use batch statistics, synchronized over the workers.
PAPER_SCHEDULE = dict(ims_per_batch=8 * 8, image_size=1024, max_iter=135_000, momentum=0.9, weight_decay=4e-5,
                      base_lr=0.1, steps=(120_000, 125_000), gamma=0.1)
PAPER_LAYERS = {"bn": ("bn_relu", True, 0), "gn": ("gn_relu", False, 32), "evonorm_b0": ("evonorm_b0", True, 0),
                "evonorm_s0": ("evonorm_s0", False, 32)}  # name, synchronized, groups (0: default 32)


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_every_paper_config_follows_the_papers_schedule_and_layer(name):
    cfg = config(name)
    depth, layer = name.split("_")[2], name.split("_", 3)[3]
    assert cfg.MODEL.RESNETS.DEPTH == int(depth[1:]) and cfg.MODEL.WEIGHTS == "" and cfg.MODEL.BACKBONE.FREEZE_AT == 0
    solver = cfg.SOLVER
    assert solver.IMS_PER_BATCH == PAPER_SCHEDULE["ims_per_batch"] and solver.BASE_LR == PAPER_SCHEDULE["base_lr"]
    assert solver.MOMENTUM == PAPER_SCHEDULE["momentum"] and solver.WEIGHT_DECAY == PAPER_SCHEDULE["weight_decay"]
    assert solver.MAX_ITER == PAPER_SCHEDULE["max_iter"] and tuple(solver.STEPS) == PAPER_SCHEDULE["steps"]
    assert solver.GAMMA == PAPER_SCHEDULE["gamma"] and solver.LR_SCHEDULER_NAME == "WarmupMultiStepLR"
    assert cfg.INPUT.LSJ.ENABLED and cfg.INPUT.LSJ.IMAGE_SIZE == PAPER_SCHEDULE["image_size"]
    assert cfg.INPUT.MAX_SIZE_TEST == PAPER_SCHEDULE["image_size"]
    assert cfg.DATASETS.TRAIN == ("coco_2017_train",) and cfg.DATASETS.TEST == ("coco_2017_val",)
    norm_name, sync, groups = PAPER_LAYERS[layer]
    assert (cfg.MODEL.NORM_ACT.NAME, cfg.MODEL.NORM_ACT.SYNC) == (norm_name, sync)
    assert cfg.MODEL.NORM_ACT.GROUPS in (groups, 0) and cfg.MODEL.RPN.HEAD_NAME == "NormActRPNHead"
    grouped = [norm_of(m) for m in paper_model(name).modules() if isinstance(m, Conv2d) and m.norm is not None]
    if groups:  # every grouped layer of the model uses 32 groups (all widths here are multiples of 32)
        assert {n.groups for n in grouped} == {32}


@pytest.mark.parametrize("depth", ["R50", "R101"])
def test_parameter_counts_match_baseline_and_paper(depth):
    counts = {n: sum(p.numel() for p in paper_model(f"mask_rcnn_{depth}_{n}").parameters()) for n in LAYER_OF}
    assert counts["bn"] == counts["gn"]
    assert counts["evonorm_b0"] == counts["evonorm_s0"]
    # EvoNorm adds one v1 per channel of each norm-act with activation: the paper's +0.01M / +0.02M.
    overhead_m = (counts["evonorm_b0"] - counts["bn"]) / 1e6
    params = {layer: TABLE4.cell(CONFIG_ROWS[f"mask_rcnn_{depth}_{layer}"], "params (M)") for layer in ("bn", "evonorm_b0")}
    paper = params["evonorm_b0"] - params["bn"]
    assert overhead_m == pytest.approx(paper, abs=0.006)
    # detectron2's P6 is a max-pool (the TF reference: a 3x3 conv, 0.59M) and COCO has 80 classes here (TF: 90+1).
    assert counts["bn"] / 1e6 == pytest.approx(params["bn"], rel=0.02)


def synthetic_batch(size: int, boxes_per_image: list[int]) -> list[dict]:
    batch = []
    for count in boxes_per_image:
        instances = Instances((size, size))
        corners = torch.rand(count, 2) * size / 2
        instances.gt_boxes = Boxes(torch.cat([corners, corners + size / 4 + torch.rand(count, 2) * size / 4], 1))
        instances.gt_classes = torch.randint(0, 3, (count,))
        masks = torch.zeros(count, size, size, dtype=torch.bool)
        for mask, (x0, y0, x1, y1) in zip(masks, instances.gt_boxes.tensor.long().tolist()):
            mask[y0:y1, x0:x1] = True
        instances.gt_masks = BitMasks(masks)
        batch.append({"image": torch.rand(3, size, size) * 255, "instances": instances})
    return batch


def assert_finite(model: nn.Module, losses: dict) -> None:
    assert all(torch.isfinite(v) for v in losses.values()), losses
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    for name, b in model.named_buffers():
        assert not b.is_floating_point() or torch.isfinite(b).all(), name


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["gn", "evonorm_s0", "evonorm_b0"])
def test_forward_backward_with_empty_and_nonempty_instances(norm):
    model = build_model(config(f"demo_shapes_{norm}", *TINY))
    model.train()
    with EventStorage(0):
        for boxes_per_image in ([3, 0], [0, 0]):  # the second batch sends zero RoIs to the mask head
            model.zero_grad()
            losses = model(synthetic_batch(64, boxes_per_image))
            sum(losses.values()).backward()
            assert_finite(model, losses)
        assert losses["loss_mask"] == 0
    model.eval()
    with torch.no_grad():
        model.roi_heads.box_predictor.test_score_thresh = 1.0  # no detections: the mask head gets zero RoIs
        outputs = model([{"image": torch.rand(3, 64, 64) * 255}])
    assert len(outputs[0]["instances"]) == 0


@pytest.mark.parametrize("name", ["evonorm_b0", "bn_relu", "evonorm_s0", "gn_relu"])
@pytest.mark.parametrize("training", [True, False])
def test_zero_rois_give_no_nan_and_keep_statistics(name, training):
    layer = EmptyBatchSafe(build_norm_act(name, 16)).train(training)
    before = [b.clone() for b in layer.buffers()]
    x = torch.zeros(0, 16, 7, 7, requires_grad=True)
    out = layer(x)
    out.sum().backward()
    assert out.shape == x.shape
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
    for old, new in zip(before, layer.buffers()):
        assert torch.equal(old, new) or not new.is_floating_point()
    x = torch.randn(4, 16, 7, 7)
    assert torch.equal(layer.train(False)(x), layer.layer(x))  # non-empty input: the layer itself


def test_weight_decay_norm_applies_to_evonorm_parameters():
    cfg = config("demo_shapes_evonorm_b0", "SOLVER.WEIGHT_DECAY_NORM", "0.0", "SOLVER.WEIGHT_DECAY", "1e-4")
    model = build_model(cfg)
    decay_of = {p: group["weight_decay"] for group in optimizer_param_groups(cfg, model) for p in group["params"]}
    assert len(decay_of) == sum(1 for _ in model.parameters())
    norm_params = {p for m in model.modules() if isinstance(m, NormAct2d) for p in m.parameters()}
    assert any(m.nonlinearity and hasattr(m, "v1") for m in model.modules() if isinstance(m, NormAct2d))
    for p, decay in decay_of.items():
        assert decay == (0.0 if p in norm_params else 1e-4)


def test_bad_norm_name_names_the_config_key():
    with pytest.raises(ValueError, match="MODEL.NORM_ACT.*valid names"):
        build_model(config("demo_shapes_gn", "MODEL.NORM_ACT.NAME", "not_a_layer"))
    with pytest.raises(ValueError, match="MODEL.NORM_ACT.*sync"):
        build_model(config("demo_shapes_gn", "MODEL.NORM_ACT.SYNC", "True"))


def test_every_demo_config_builds():
    for name in DEMO_CONFIGS:
        assert sum(p.numel() for p in build_model(config(name)).parameters()) < 5e6


def _synced_empty_rank_worker(rank: int, init_file: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.manual_seed(0)
    layer = EmptyBatchSafe(build_norm_act("evonorm_b0", 8, sync=True)).train()
    x = torch.randn(3, 8, 5, 5) * 3 + 1 if rank == 1 else torch.zeros(0, 8, 5, 5)
    layer(x.requires_grad_()).sum().backward()
    results[rank] = layer.layer.running_var.clone()
    dist.destroy_process_group()


@pytest.mark.slow
def test_synchronized_b0_with_zero_rois_on_one_process(tmp_path):
    """A process without RoIs joins the all-reduce: no deadlock, and both get the other's statistics."""
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(_synced_empty_rank_worker, args=(str(tmp_path / "init"), results), nprocs=2, join=True)
    torch.manual_seed(0)
    x = torch.randn(3, 8, 5, 5) * 3 + 1
    expected = 0.9 + 0.1 * x.var(dim=(0, 2, 3), unbiased=True).double()
    assert torch.allclose(results[0].double(), expected, rtol=1e-4)
    assert torch.equal(results[0], results[1])


def test_bottlenecks_stride_in_the_3x3_conv_as_the_tensorflow_reference():
    """The configs' ``STRIDE_IN_1X1: False`` (the TensorFlow reference ResNet, ResNet v1.5): the first block
    of res3-res5 downsamples in its 3x3 conv (and its projection shortcut), its 1x1 convs keep stride 1."""
    stages = paper_model("mask_rcnn_R50_evonorm_s0").backbone.bottom_up
    for name in ("res3", "res4", "res5"):
        first = getattr(stages, name)[0]
        assert (first.conv1.stride, first.conv2.stride, first.conv3.stride) == ((1, 1), (2, 2), (1, 1)), name
        assert first.shortcut.stride == (2, 2)
    assert all(block.conv2.stride == (1, 1) for block in stages.res2)
