"""Mask R-CNN with norm-act layers: configs, placement, parameter counts, empty RoIs, optimizer."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("detectron2", reason="detectron2 is not installed (tools/install.sh installs it)")
pytestmark = pytest.mark.detectron2

import torch.distributed as dist
import torch.multiprocessing as mp
from detectron2.config import get_cfg
from detectron2.layers import Conv2d, ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY, build_model
from detectron2.structures import BitMasks, Boxes, Instances
from detectron2.utils.events import EventStorage
from torch import nn

from evonorm_core import build_norm_act
from evonorm_core.layers import NormAct2d
from evonorm_suite.detection import add_evonorm_config, load_config
from evonorm_suite.detection.backbone import BLOCKS_PER_STAGE
from evonorm_suite.detection.norm import EmptyBatchSafe, norm_act_maker
from evonorm_suite.detection.optimizer import build_optimizer, optimizer_param_groups
from evonorm_suite.detection.paper import CONFIG_ROWS, TABLE4

CONFIGS = Path(__file__).resolve().parents[1] / "detection" / "configs"
PAPER_CONFIGS = sorted(CONFIG_ROWS)
DEMO_CONFIGS = ["demo_shapes_gn", "demo_shapes_evonorm_s0", "demo_shapes_evonorm_b0", "demo_shapes_bn",
                "demo_shapes_no_norm_relu"]
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


def test_add_evonorm_config_adds_every_key_with_its_default():
    """``MODEL.NORM_ACT``: EvoNorm-S0, unsynchronized, 0 = the layer's own groups (32, section 5.1), eps
    (1e-5) and implementation; ``INPUT.LSJ``: off by default, 1024x1024 crops (the paper's resolution), scales
    0.8-1.25; ``SOLVER.CHECKPOINTS_KEPT``: 0, every checkpoint kept as detectron2 keeps them; nothing else of
    detectron2's defaults changes."""
    cfg = add_evonorm_config(get_cfg())
    assert dict(cfg.MODEL.NORM_ACT) == {"NAME": "evonorm_s0", "SYNC": False, "GROUPS": 0, "EPS": 0.0, "IMPL": ""}
    assert dict(cfg.INPUT.LSJ) == {"ENABLED": False, "IMAGE_SIZE": 1024, "MIN_SCALE": 0.8, "MAX_SCALE": 1.25}
    assert cfg.SOLVER.CHECKPOINTS_KEPT == 0
    plain = get_cfg()
    assert {k: v for k, v in cfg.SOLVER.items() if k != "CHECKPOINTS_KEPT"} == dict(plain.SOLVER)
    for key in ("DATALOADER", "TEST"):
        assert cfg[key] == plain[key], key
    assert {k: v for k, v in cfg.MODEL.items() if k != "NORM_ACT"} == dict(plain.MODEL)


def test_norm_act_options_reach_the_layer_only_when_set():
    """The defaults build the registered layer as it is (32 groups, eps 1e-5, unsynchronized, fused); GROUPS,
    EPS, IMPL and SYNC each reach it when set."""
    cfg = add_evonorm_config(get_cfg())
    layer = norm_act_maker(cfg)(64, True)
    assert (type(layer).__name__, layer.groups, layer.eps, layer.impl) == ("EvoNormS0", 32, 1e-5, "fused")
    assert layer.nonlinearity is True
    assert norm_act_maker(cfg)(64, False).nonlinearity is False
    cfg.MODEL.NORM_ACT.GROUPS, cfg.MODEL.NORM_ACT.EPS, cfg.MODEL.NORM_ACT.IMPL = 8, 1e-3, "reference"
    layer = norm_act_maker(cfg)(64, True)
    assert (layer.groups, layer.eps, layer.impl) == (8, 1e-3, "reference")
    cfg.MODEL.NORM_ACT.merge_from_list(["NAME", "bn", "GROUPS", 0, "EPS", 0.0, "IMPL", ""])
    assert norm_act_maker(cfg)(16).sync is False and type(norm_act_maker(cfg)(16)).__name__ == "BatchNormAct2d"
    cfg.MODEL.NORM_ACT.SYNC = True
    assert norm_act_maker(cfg)(16).sync is True


def test_load_config_applies_overrides_after_the_file_and_follows_bases(tmp_path):
    """KEY VALUE overrides win over the YAML, which wins over its ``_BASE_`` (named relative to the file);
    a cycle of bases or a missing base is an error naming the files."""
    (tmp_path / "sub").mkdir()
    base = tmp_path / "sub" / "base.yaml"
    base.write_text(f'_BASE_: "{CONFIGS / "demo_shapes_gn.yaml"}"\nSOLVER:\n  BASE_LR: 0.5\n  MAX_ITER: 7\n')
    child = tmp_path / "sub" / "child.yaml"
    child.write_text('_BASE_: "base.yaml"\nSOLVER:\n  BASE_LR: 0.25\n')
    cfg = load_config(str(child), ["SOLVER.MAX_ITER", "9"])
    assert (cfg.SOLVER.BASE_LR, cfg.SOLVER.MAX_ITER, cfg.MODEL.NORM_ACT.NAME) == (0.25, 9, "gn_relu")
    assert load_config(str(child)).SOLVER.MAX_ITER == 7
    loop = tmp_path / "loop.yaml"
    loop.write_text('_BASE_: "loop2.yaml"\n')
    (tmp_path / "loop2.yaml").write_text('_BASE_: "loop.yaml"\n')
    with pytest.raises(ValueError, match=r"_BASE_ files form a cycle: .*loop.yaml -> .*loop2.yaml -> .*loop.yaml"):
        load_config(str(loop))
    orphan = tmp_path / "orphan.yaml"
    orphan.write_text('_BASE_: "gone.yaml"\n')
    with pytest.raises(ValueError, match=r"orphan.yaml' names _BASE_ .*gone.yaml', which does not exist"):
        load_config(str(orphan))


# He et al. (2016), Table 1: blocks per stage of ResNet-18/34/50/101/152.
RESNET_BLOCKS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def conv_layout(module: nn.Module) -> dict:
    return {name: (tuple(m.weight.shape), m.stride, m.padding, m.groups)
            for name, m in module.named_modules() if isinstance(m, nn.Conv2d)}


@pytest.mark.parametrize("name, opts", [
    ("mask_rcnn_R50_evonorm_s0", []),
    # detectron2's basic-block ResNet needs 64 channels in res2; the demo's basic blocks at that width
    ("demo_shapes_gn", ["MODEL.RESNETS.STEM_OUT_CHANNELS", "64", "MODEL.RESNETS.RES2_OUT_CHANNELS", "64"]),
])
def test_backbone_convolutions_are_detectron2s_resnet_fpn(name, opts):
    """Every convolution of the norm-act ResNet-FPN (weight shape, stride, padding, groups) and every output
    level (channels, stride) is that of detectron2's own ``build_resnet_fpn_backbone`` for the same
    MODEL.RESNETS/FPN settings; only the norms differ. Also the block counts of He et al.'s Table 1."""
    assert BLOCKS_PER_STAGE == RESNET_BLOCKS
    cfg = config(name, *opts)
    ours = BACKBONE_REGISTRY.get("build_norm_act_resnet_fpn_backbone")(cfg, ShapeSpec(channels=3))
    cfg = cfg.clone()
    cfg.MODEL.RESNETS.NORM, cfg.MODEL.FPN.NORM = "BN", "BN"
    theirs = BACKBONE_REGISTRY.get("build_resnet_fpn_backbone")(cfg, ShapeSpec(channels=3))
    assert conv_layout(ours) == conv_layout(theirs)
    assert ours.output_shape() == theirs.output_shape()
    with torch.no_grad():  # the stem's max-pool and each level's resolution, not only the declared strides
        image = torch.zeros(1, 3, 128, 128)
        shapes = [{k: v.shape for k, v in b.eval()(image).items()} for b in (ours, theirs)]
        assert shapes[0] == shapes[1]
    assert [len(getattr(ours.bottom_up, f"res{i}")) for i in (2, 3, 4, 5)] == RESNET_BLOCKS[cfg.MODEL.RESNETS.DEPTH]


def test_freeze_at_freezes_the_stem_and_first_stages():
    """``MODEL.BACKBONE.FREEZE_AT`` k freezes the stem (1) and res2..res(k) (the paper's configs: 0, nothing)."""
    build = BACKBONE_REGISTRY.get("build_norm_act_resnet_fpn_backbone")
    frozen = build(config("demo_shapes_evonorm_s0", "MODEL.BACKBONE.FREEZE_AT", "2"), ShapeSpec(channels=3))
    trainable = {name.split(".")[1] for name, p in frozen.named_parameters() if p.requires_grad}
    assert {name.split(".")[1] for name, p in frozen.named_parameters() if not p.requires_grad} == {"stem", "res2"}
    assert {"res3", "res4", "res5"} <= trainable
    free = build(config("demo_shapes_evonorm_s0"), ShapeSpec(channels=3))
    assert all(p.requires_grad for p in free.parameters())


def test_optimizer_groups_follow_every_solver_setting():
    """Norm-act parameters (gamma, beta, v1 of backbone, FPN, RPN and heads) take WEIGHT_DECAY_NORM, other
    biases WEIGHT_DECAY_BIAS, all other weights WEIGHT_DECAY; biases (norm betas included) run at
    BASE_LR * BIAS_LR_FACTOR; SGD takes MOMENTUM and NESTEROV from the config."""
    cfg = config("demo_shapes_evonorm_b0", *TINY, "SOLVER.WEIGHT_DECAY", "1e-4", "SOLVER.WEIGHT_DECAY_NORM", "0.5",
                 "SOLVER.WEIGHT_DECAY_BIAS", "0.25", "SOLVER.BIAS_LR_FACTOR", "2.0", "SOLVER.BASE_LR", "0.1",
                 "SOLVER.MOMENTUM", "0.8", "SOLVER.NESTEROV", "True")
    model = build_model(cfg)
    optimizer = build_optimizer(cfg, model)
    assert isinstance(optimizer, torch.optim.SGD)
    settings = {p: (g["lr"], g["weight_decay"], g["momentum"], g["nesterov"])
                for g in optimizer.param_groups for p in g["params"]}
    norm_params = {p for m in model.modules() if isinstance(m, NormAct2d) for p in m.parameters()}
    assert len(settings) == sum(1 for _ in model.parameters())
    assert any(n.startswith("proposal_generator") for n, p in model.named_parameters() if p in norm_params)
    for name, p in model.named_parameters():
        bias = name.endswith("bias")
        decay = 0.5 if p in norm_params else 0.25 if bias else 1e-4
        assert settings[p] == pytest.approx((0.2 if bias else 0.1, decay, 0.8, True)), name


def test_paper_base_config_sets_the_heads_and_inputs():
    """The rest of the base config: 80 COCO classes with masks, a 4-conv + 1-fc box head and a 4-conv mask
    head (detectron2's heads for normalized Mask R-CNN), FPN P2-P6 anchors, bitmask crops with scale jitter
    0.8-1.25 to 1024, test images at 1024, weight decay 0 on norm parameters, linear warmup of 1000 steps."""
    cfg = config("mask_rcnn_R50_evonorm_s0")
    assert cfg.MODEL.MASK_ON and cfg.MODEL.ROI_HEADS.NUM_CLASSES == 80
    assert cfg.MODEL.META_ARCHITECTURE == "GeneralizedRCNN"
    box_head = cfg.MODEL.ROI_BOX_HEAD
    assert (box_head.NAME, box_head.NUM_CONV, box_head.NUM_FC) == ("NormActConvFCHead", 4, 1)
    assert (cfg.MODEL.ROI_MASK_HEAD.NAME, cfg.MODEL.ROI_MASK_HEAD.NUM_CONV) == ("NormActMaskHead", 4)
    assert cfg.MODEL.BACKBONE.NAME == "build_norm_act_resnet_fpn_backbone" and cfg.MODEL.RESNETS.STRIDE_IN_1X1 is False
    assert cfg.MODEL.ANCHOR_GENERATOR.SIZES == [[32], [64], [128], [256], [512]]
    assert cfg.MODEL.RPN.IN_FEATURES == ["p2", "p3", "p4", "p5", "p6"]
    assert cfg.MODEL.FPN.IN_FEATURES == ["res2", "res3", "res4", "res5"]
    assert cfg.INPUT.MASK_FORMAT == "bitmask" and (cfg.INPUT.LSJ.MIN_SCALE, cfg.INPUT.LSJ.MAX_SCALE) == (0.8, 1.25)
    assert cfg.INPUT.MIN_SIZE_TEST == cfg.INPUT.MAX_SIZE_TEST == 1024
    assert cfg.SOLVER.WEIGHT_DECAY_NORM == 0.0 and (cfg.SOLVER.WARMUP_ITERS, cfg.SOLVER.WARMUP_FACTOR) == (1000, 0.001)
    model = paper_model("mask_rcnn_R50_evonorm_s0")
    assert len(model.roi_heads.box_head.fcs) == 1 and model.roi_heads.box_head.fcs[0].out_features == 1024
    assert model.roi_heads.box_predictor.cls_score.out_features == 81
