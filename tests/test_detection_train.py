"""The detection entry points end to end: demo data, training + COCO evaluation, resume, report, cost, errors."""
from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("detectron2", reason="detectron2 is not installed (tools/install.sh installs it)")
pytestmark = pytest.mark.detectron2

import detectron2.data.transforms as T
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets import register_coco_instances
from detectron2.engine import hooks
from detectron2.modeling import build_model
from pycocotools.coco import COCO

from evonorm_core import running_stats
from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.rundir import RunDir
from evonorm_core.experiment.stopping import Interrupted
from evonorm_suite.detection import data, load_config, miniature, report, shapes, train_net
from evonorm_suite.detection.cost import count_parameters, model_cost
from evonorm_suite.detection.cost import main as cost_main
from evonorm_suite.detection.data import train_augmentations
from evonorm_suite.detection.paper import CONFIG_ROWS, TABLE4, paper_cells
from evonorm_suite.detection.shapes import (
    CLASSES,
    SPLITS,
    ensure_shapes_dataset,
    register_shapes_dataset,
    shape_polygon,
    write_split,
)
from evonorm_suite.detection.trainer import NormActTrainer
from tests.test_detection_model import TINY as TINY_MODEL
from tests.tool_scripts import load

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "detection" / "configs"
# The tiny demo model of test_detection_model, trained with small batches and evaluated at every score.
TINY = [
    *TINY_MODEL, "SOLVER.IMS_PER_BATCH", "2", "DATALOADER.NUM_WORKERS", "0", "SOLVER.WARMUP_ITERS", "1",
    "MODEL.ROI_HEADS.SCORE_THRESH_TEST", "0.0",
]


def first_images(dataset: str, count: int) -> str:
    """Register a COCO dataset of the first ``count`` images of ``dataset`` (a quick evaluation set)."""
    name = f"{dataset}_first{count}"
    metadata = MetadataCatalog.get(dataset)
    coco = json.loads(Path(metadata.json_file).read_text())
    coco["images"] = coco["images"][:count]
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] <= coco["images"][-1]["id"]]
    json_file = Path(metadata.json_file).with_name(f"{name}.json")
    json_file.write_text(json.dumps(coco))
    if name not in DatasetCatalog.list():
        register_coco_instances(name, {}, str(json_file), metadata.image_root)
    return name


@pytest.fixture(scope="module")
def datasets_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DETECTRON2_DATASETS", str(root))
        yield root


@pytest.fixture(scope="module")
def demo_run(datasets_root, tmp_path_factory):
    """Train the EvoNorm-B0 demo for 2 iterations, evaluate, then resume to 3 iterations and evaluate."""
    output = tmp_path_factory.mktemp("output") / "demo_shapes_evonorm_b0"
    config = str(CONFIGS / "demo_shapes_evonorm_b0.yaml")
    val = register_shapes_dataset()[1]
    quick_test_set = f"('{first_images(val, 3)}',)"
    common = ["--threads", "2", "--config", config, *TINY, "OUTPUT_DIR", str(output), "DATASETS.TEST", quick_test_set]
    assert train_net.main([*common, "SOLVER.MAX_ITER", "2"]) == 0
    first = json.loads((output / report.RESULTS_FILE).read_text())
    assert train_net.main(["--resume", *common, "SOLVER.MAX_ITER", "3"]) == 0
    resumed = json.loads((output / report.RESULTS_FILE).read_text())
    return output, first, resumed


def test_shapes_dataset_is_valid_coco(datasets_root):
    paths = ensure_shapes_dataset(datasets_root / "shapes", size=64)
    for split, json_path in paths.items():
        coco = COCO(str(json_path))
        assert len(coco.getImgIds()) == SPLITS[split]
        assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == list(CLASSES)
        annotations = coco.loadAnns(coco.getAnnIds())
        assert annotations and any(not coco.getAnnIds(imgIds=[i]) for i in coco.getImgIds())  # some images are empty
        for annotation in annotations[:50]:
            mask = coco.annToMask(annotation)
            assert mask.shape == (64, 64) and mask.sum() == pytest.approx(annotation["area"], rel=0.25, abs=8)
            x, y, w, h = annotation["bbox"]
            assert 0 <= x and 0 <= y and x + w <= 64 and y + h <= 64
    assert ensure_shapes_dataset(datasets_root / "shapes", size=64) == paths  # reused, not rewritten



@pytest.mark.parametrize("kind, vertices", [("triangle", 3), ("square", 4), ("circle", 32)])
def test_shapes_are_regular_polygons_around_their_centre(kind, vertices):
    """n distinct vertices at the radius, equal sides 2 r sin(pi / n), centroid at the centre."""
    polygon = np.asarray(shape_polygon(np.random.default_rng(0), kind, 20.0, 30.0, 10.0)).reshape(-1, 2)
    assert polygon.shape == (vertices, 2)
    np.testing.assert_allclose(np.hypot(polygon[:, 0] - 20, polygon[:, 1] - 30), 10.0)
    sides = np.linalg.norm(polygon - np.roll(polygon, 1, axis=0), axis=1)
    np.testing.assert_allclose(sides, 2 * 10.0 * np.sin(np.pi / vertices))
    np.testing.assert_allclose(polygon.mean(axis=0), [20.0, 30.0], atol=1e-9)


def test_shapes_dataset_of_another_size_is_rewritten_and_one_of_the_same_size_kept(tmp_path, small_shapes, capsys):
    paths = ensure_shapes_dataset(tmp_path, size=32)
    assert f"generated the built-in shapes dataset's train split (3 images, 32 px): {paths['train']}" in (
        capsys.readouterr().out)
    written = {split: path.stat().st_mtime_ns for split, path in paths.items()}
    assert ensure_shapes_dataset(tmp_path, size=32) == paths
    assert "generated" not in capsys.readouterr().out  # reused, said nothing
    assert {split: path.stat().st_mtime_ns for split, path in paths.items()} == written  # reused
    ensure_shapes_dataset(tmp_path, size=40)
    assert f"{paths['train']}: written for 32 px images and seed 0, not 40 px and seed 0; generating the train split again" in capsys.readouterr().out
    for split, path in paths.items():
        coco = json.loads(path.read_text())
        assert coco["info"]["image_size"] == 40 and {(i["width"], i["height"]) for i in coco["images"]} == {(40, 40)}
        assert Image.open(tmp_path / split / coco["images"][0]["file_name"]).size == (40, 40)

@pytest.fixture
def small_shapes(monkeypatch):
    """Splits of 3 and 2 images."""
    monkeypatch.setitem(SPLITS, "train", 3)
    monkeypatch.setitem(SPLITS, "val", 2)


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


@pytest.mark.parametrize("damage, reason", [
    (truncate, "not valid JSON"),
    (lambda path: path.write_text("[]"), "not a shapes dataset file"),
    (lambda path: (path.with_suffix("") / "000002.png").unlink(), "image {} is missing"),
    (lambda path: path.write_text(path.read_text().replace('"seed": 0', '"seed": 7')),
     "written for 32 px images and seed 7, not 32 px and seed 0"),
])
def test_shapes_split_that_is_damaged_or_lacks_an_image_is_generated_again(
        tmp_path, small_shapes, capsys, damage, reason):
    paths = ensure_shapes_dataset(tmp_path, size=32)
    expected = json.loads(paths["train"].read_text())
    damage(paths["train"])
    capsys.readouterr()
    assert ensure_shapes_dataset(tmp_path, size=32) == paths
    out = capsys.readouterr().out
    reason = reason.format(tmp_path / "train" / "000002.png")
    assert f"{paths['train']}: {reason}; generating the train split again" in out
    assert "generated the built-in shapes dataset's train split" in out and "val split" not in out
    assert json.loads(paths["train"].read_text()) == expected  # the same seed: the same split
    assert (tmp_path / "train" / "000002.png").is_file()


def test_concurrent_callers_generate_each_shapes_split_once(tmp_path, small_shapes, monkeypatch):
    """The second caller waits for the first one's lock and reuses what it wrote."""
    written = []

    def slow_write_split(*args):
        written.append(args[1])
        time.sleep(0.2)  # a window in which a caller without the lock would find no json
        return write_split(*args)

    monkeypatch.setattr(shapes, "write_split", slow_write_split)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: ensure_shapes_dataset(tmp_path, size=32), range(2)))
    assert results[0] == results[1] and sorted(written) == ["train", "val"]


@pytest.mark.slow
def test_demo_trains_evaluates_and_resumes(demo_run):
    output, first, resumed = demo_run
    for results in (first, resumed):
        for task in ("bbox", "segm"):
            assert {"AP", "AP50", "AP75"} <= set(results[task])
            assert all(isinstance(v, float) for v in results[task].values())
    iterations = [json.loads(line)["iteration"] for line in (output / "metrics.json").read_text().splitlines()]
    assert max(iterations) >= 2  # iteration 2 was trained after resuming
    assert "Starting training from iteration 2" in (output / "log.txt").read_text()
    assert json.loads((output / report.RESULTS_FILE).read_text()) == json.loads(json.dumps(resumed))
    assert list(output.glob("events.out.tfevents.*")), "TensorBoard scalars are written"


@pytest.mark.slow
def test_resume_refuses_another_experiment_in_the_runs_folder(demo_run, tmp_path):
    """The EvoNorm-B0 run resumed with the GN config (or another learning rate) is refused naming each key; the
    run's own config with a longer SOLVER.MAX_ITER is what demo_run resumed with."""
    output = demo_run[0]
    copy = tmp_path / "run"
    shutil.copytree(output, copy)
    argv = ["--resume", "--threads", "1", "--config", str(CONFIGS / "demo_shapes_gn.yaml"), *TINY, "OUTPUT_DIR",
            str(copy), "SOLVER.BASE_LR", "0.5"]
    with pytest.raises(SystemExit) as refused:
        train_net.main(argv)
    message = str(refused.value.code)
    assert message.startswith(f"error: --resume cannot change the run in {copy} (")
    assert "MODEL.NORM_ACT.NAME: the run has 'evonorm_b0', given 'gn_relu'" in message
    assert "SOLVER.BASE_LR: the run has" in message and "given 0.5" in message
    assert (copy / "model_final.pth").read_bytes() == (output / "model_final.pth").read_bytes()
    with open(copy / "config.yaml", "a") as saved:  # written by a version with another config key
        saved.write("UNKNOWN_KEY_OF_ANOTHER_VERSION: 1\n")
    argv[argv.index("--config") + 1] = str(CONFIGS / "demo_shapes_evonorm_b0.yaml")
    with pytest.raises(SystemExit, match=rf"^error: --resume: the run's own config {copy / 'config.yaml'} cannot be "
                                         r"read by this version \(.*UNKNOWN_KEY_OF_ANOTHER_VERSION"):
        train_net.main(argv)


def test_a_stop_whose_end_of_training_hooks_then_fail_still_saves_and_stops(datasets_root, tmp_path, monkeypatch):
    """A stop signal inside a hook (a CI run's SIGTERM cut TensorBoard's lazy import short, and the writer's import
    failed again in after_train): still the model of the last finished iteration and the stop's status, not the
    hook's traceback."""
    class StopInsideAHook(hooks.HookBase):
        def after_step(self):
            if self.trainer.iter == 1:
                raise Interrupted(signal.SIGTERM)

        def after_train(self):
            raise AttributeError("partially initialized module 'fsspec' has no attribute 'utils'")

    built = NormActTrainer.build_hooks
    monkeypatch.setattr(NormActTrainer, "build_hooks", lambda self: [*built(self), StopInsideAHook()])
    output = tmp_path / "run"
    argv = ["--threads", "1", "--config", str(CONFIGS / "demo_shapes_evonorm_s0.yaml"), *TINY, "SOLVER.MAX_ITER", "5",
            "TEST.EVAL_PERIOD", "0", "OUTPUT_DIR", str(output)]
    with pytest.raises(SystemExit) as stopped:
        train_net.main(argv)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert (output / "last_checkpoint").read_text() == "model_0000001.pth" and (output / "model_0000001.pth").is_file()


@pytest.mark.slow
def test_eval_only_of_a_trained_run_scores_its_checkpoint(demo_run, tmp_path):
    """--eval-only with no MODEL.WEIGHTS on a run's OUTPUT_DIR loads the run's last checkpoint (it scored a model
    with random weights, and wrote that as the run's result)."""
    output, _, resumed = demo_run
    copy = tmp_path / "run"
    shutil.copytree(output, copy)
    (copy / report.RESULTS_FILE).unlink()
    trained = len((copy / "log.txt").read_text())
    val = register_shapes_dataset()[1]
    assert train_net.main(["--threads", "2", "--eval-only", "--config", str(CONFIGS / "demo_shapes_evonorm_b0.yaml"),
                           *TINY, "OUTPUT_DIR", str(copy), "DATASETS.TEST", f"('{first_images(val, 3)}',)"]) == 0
    evaluation_log = (copy / "log.txt").read_text()[trained:]
    assert f"Loading from {copy / 'model_final.pth'}" in evaluation_log and "from scratch" not in evaluation_log
    assert json.loads((copy / report.RESULTS_FILE).read_text()) == resumed


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_training_saves_its_last_iteration_and_resumes_there(datasets_root, tmp_path, signum):
    """A real process stopped by a signal mid-run (no periodic checkpoint due): one line naming the resume command,
    status 128 + signal, and model_N.pth of the last finished iteration N, from which --resume starts N + 1."""
    output = tmp_path / "run"
    config = str(CONFIGS / "demo_shapes_evonorm_s0.yaml")
    argv = ["--threads", "1", "--config", config, *TINY, "SOLVER.MAX_ITER", "100000", "SOLVER.CHECKPOINT_PERIOD",
            "100000", "TEST.EVAL_PERIOD", "0", "OUTPUT_DIR", str(output)]
    env = {**os.environ, "DETECTRON2_DATASETS": str(datasets_root), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(ROOT / "tools" / "train_net.py"), *argv], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    metrics = output / "metrics.json"
    while not (metrics.exists() and metrics.read_text().strip()) and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)  # its first line: 20 iterations done
    process.send_signal(signum)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum and "Traceback" not in err, err[-3000:]
    name = signal.Signals(signum).name
    assert err.strip().splitlines()[-1] == (f"python tools/train_net.py: stopped by {name}; the run resumes from its "
                                            f"last checkpoint with: {train_net.resume_command(train_net.parse_args(argv))}")
    saved = (output / "last_checkpoint").read_text()
    done = int(re.fullmatch(r"model_(\d{7})\.pth", saved)[1])
    assert done >= 19 and (output / saved).is_file()
    resumed = [*argv[:-6], "SOLVER.MAX_ITER", str(done + 2), "TEST.EVAL_PERIOD", "0", "OUTPUT_DIR", str(output)]
    done_again = subprocess.run([sys.executable, str(ROOT / "tools" / "train_net.py"), "--resume", *resumed], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done_again.returncode == 0, done_again.stderr[-3000:]
    assert f"Starting training from iteration {done + 1}" in (output / "log.txt").read_text()


@pytest.mark.slow
def test_report_prints_results_next_to_paper(demo_run, capsys, tmp_path):
    output, _, resumed = demo_run
    report.main([str(output), "--plot", str(tmp_path / "loss.png")])
    table = capsys.readouterr().out
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    row = next(line for line in table.splitlines() if output.name in line)
    assert f"{resumed['bbox']['AP']:.1f} / {resumed['bbox']['AP50']:.1f}" in row
    assert f"{resumed['segm']['AP']:.1f} / {resumed['segm']['AP50']:.1f}" in row
    paper_dir = tmp_path / "mask_rcnn_R50_evonorm_b0"
    paper_dir.mkdir()
    (paper_dir / report.RESULTS_FILE).write_text(json.dumps(resumed))
    report.main([str(paper_dir)])
    assert "44.0 / 65.2 / 48.1" in capsys.readouterr().out  # Table 4, R-50-FPN EvoNorm-B0 box AP
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "missing")])
    assert "no evaluation" in capsys.readouterr().err


def test_missing_coco_gives_one_clear_message(datasets_root, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_net.main(["--config", str(CONFIGS / "mask_rcnn_R50_bn.yaml")])
    message = str(exit_info.value.code)
    assert "$DETECTRON2_DATASETS/coco" in message and "instances_train2017.json" in message
    assert "demo_shapes_evonorm_s0.yaml" in message and "Traceback" not in message


def test_bad_config_input_gives_clear_errors(datasets_root, capsys):
    with pytest.raises(SystemExit):
        train_net.parse_args(["--config", "no/such/config.yaml"])
    assert "no/such/config.yaml" in capsys.readouterr().err
    demo = str(CONFIGS / "demo_shapes_gn.yaml")
    with pytest.raises(SystemExit) as exit_info:
        train_net.main(["--config", demo, "MODEL.NO_SUCH_KEY", "1"])
    assert "MODEL.NO_SUCH_KEY" in str(exit_info.value.code)


def test_train_net_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit):
        train_net.parse_args(["--help"])
    text = capsys.readouterr().out
    flags = ["--config", "--config-file", "--num-gpus", "--num-machines", "--machine-rank", "--dist-url", "--resume"]
    for flag in (*flags, "--eval-only", "--threads"):
        assert re.search(rf"{flag}\b", text), flag


def test_model_cost_counts_convolutions_and_parameters():
    cfg = load_config(str(CONFIGS / "demo_shapes_gn.yaml"), [*TINY, "MODEL.DEVICE", "cpu"])
    cost = model_cost(cfg, image_size=64)

    assert cost.params_m == pytest.approx(count_parameters(build_model(cfg.clone())) / 1e6)
    stem_madds = 16 * 3 * 7 * 7 * 32 * 32  # the stem conv alone: 7x7, 3->16 channels on a 32x32 output
    assert stem_madds / 1e9 < cost.madds_b < 1.0


def test_a_config_that_would_build_python_objects_is_refused(tmp_path, datasets_root):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(
        f'_BASE_: "{CONFIGS / "demo_shapes_gn.yaml"}"\n'
        f'OUTPUT_DIR: !!python/object/apply:os.system ["touch {marker}"]\n'
    )
    with pytest.raises(ValueError, match=r"evil.yaml' uses a YAML tag that builds Python objects"):
        load_config(str(evil))
    with pytest.raises(SystemExit) as exit_info:
        train_net.main(["--config", str(evil)])
    assert "builds Python objects" in str(exit_info.value.code) and not marker.exists()


def test_output_dir_of_another_run_is_refused_without_resume(tmp_path, datasets_root):
    output = tmp_path / "run"
    output.mkdir()
    (output / "model_final.pth").write_bytes(b"earlier run")
    demo = str(CONFIGS / "demo_shapes_gn.yaml")
    with pytest.raises(SystemExit) as exit_info:
        train_net.main(["--config", demo, "OUTPUT_DIR", str(output)])
    message = str(exit_info.value.code)
    assert "is not empty (model_final.pth); pass --resume" in message
    assert (output / "model_final.pth").read_bytes() == b"earlier run"


def test_a_second_writer_of_one_output_dir_is_refused(tmp_path, datasets_root):
    output = tmp_path / "run"
    demo = str(CONFIGS / "demo_shapes_gn.yaml")
    with RunDir(output):  # another run holds the folder
        with pytest.raises(SystemExit) as exit_info:
            train_net.main(["--resume", "--config", demo, "OUTPUT_DIR", str(output)])
    assert "is in use by process" in str(exit_info.value.code)


def test_model_cost_command_prints_paper_columns(capsys):
    cost_main(["--config", str(CONFIGS / "demo_shapes_gn.yaml"), "--image-size", "64", *TINY])
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("| config (64x64) | MAdds (B) | paper MAdds (B)") and "demo_shapes_gn.yaml" in rows[-1]
    assert rows[-1].endswith("| - |")  # the demo is not in Table 4


def test_miniature_commands_and_summary(tmp_path):
    run = miniature.Run(miniature.SETTINGS[1], "bn", 2)
    command = run.command(tmp_path, 300)
    assert command[1:3] == ["-m", "evonorm_suite.detection.train_net"] and "demo_shapes_bn.yaml" in command[command.index("--config") + 1]
    values = dict(zip(command[command.index("SEED")::2], command[command.index("SEED") + 1::2]))
    assert values["SEED"] == "2" and values["SOLVER.IMS_PER_BATCH"] == "2" and float(values["SOLVER.BASE_LR"]) == 0.005
    # batch 2 sees batch 8's images: 4x the steps, warmup and decays scaled with them
    assert values["SOLVER.MAX_ITER"] == "1200" and values["SOLVER.STEPS"] == "(960, 1116)"
    assert values["SOLVER.WARMUP_ITERS"] == "200" and values["TEST.EVAL_PERIOD"] == "120"  # 10 evaluations
    assert values["SOLVER.CHECKPOINT_PERIOD"] == "120" and values["SOLVER.CHECKPOINTS_KEPT"] == "1"
    assert values["OUTPUT_DIR"] == str(tmp_path / "2400_images" / "batch2" / "bn" / "seed2")  # runs of 2400 images
    probe = miniature.Run(miniature.SETTINGS[1], "bn", 2, overrides=("MODEL.RESNETS.DEPTH", "50"))
    assert probe.command(tmp_path, 300) == [*command, "MODEL.RESNETS.DEPTH", "50"]  # after the grid's own: they win
    for seed, ap in ((0, 20.0), (1, 24.0)):
        folder = miniature.Run(miniature.SETTINGS[0], "evonorm_s0", seed).output_dir(tmp_path, 300)
        folder.mkdir(parents=True)
        (folder / report.RESULTS_FILE).write_text(json.dumps(
            {"bbox": {"AP": ap, "AP50": 40.0}, "segm": {"AP": ap - 2, "AP50": 38.0}}))
        # a resumed run logs iteration 19 twice: the last value counts; seed 1 logged one step more
        write_metrics(folder, [{"iteration": 19, "total_loss": 9.0}, {"iteration": 19, "total_loss": 2.0 + seed},
                               {"iteration": 29, "bbox/AP": 1.0, "segm/AP": 2.0},
                               {"iteration": 29, "bbox/AP": ap - 4, "segm/AP": ap - 5},
                               {"iteration": 39, "total_loss": 1.0 + seed},
                               {"iteration": 59, "bbox/AP": ap - 1, "segm/AP": ap - 3},
                               {"iteration": 89, "bbox/AP": ap - 0.5, "segm/AP": ap - 2.5},
                               {"iteration": 300, "bbox/AP": ap, "segm/AP": ap - 2},  # after training
                               *([{"iteration": 59, "total_loss": 0.5}] if seed else [])])
    summary = miniature.summarize(tmp_path, (0, 1, 2), 300)
    s0 = next(c for c in summary["cells"] if c["setting"] == "batch8" and c["layer"] == "evonorm_s0")
    assert s0["box_ap_mean"] == 22.0 and s0["mask_ap_std"] == pytest.approx(2 ** 0.5 * 2) and len(s0["runs"]) == 2
    assert (s0["iterations"], s0["images_seen"]) == (300, 2400)
    assert s0["runs"][0]["loss"] == [[160, 2.0], [320, 1.0]]  # [images seen, loss]
    assert s0["runs"][0]["validation"] == [[240, 16.0, 15.0], [480, 19.0, 17.0], [720, 19.5, 17.5],
                                           [2400, 20.0, 18.0]]  # the last: after step 300 of 8 images
    assert s0["runs"][0]["flatness"] == {"points": 2, "range": 0.5, "slope": 0.5}  # the last fifth: 2 evaluations
    assert s0["last_fifth_range_max"] == 0.5 and summary["evaluations_per_run"] == miniature.EVALUATIONS == 10
    bn2 = next(c for c in summary["cells"] if c["setting"] == "batch2" and c["layer"] == "bn")
    assert (bn2["iterations"], bn2["images_seen"], bn2["runs"]) == (1200, 2400, [])
    assert {c["layer"] for c in summary["cells"]} == {"bn", "gn", "evonorm_b0", "evonorm_s0", "no_norm_relu"}
    assert "| batch8 | EvoNorm-S0 | 22.0 ± 2.8 (n=2) | 20.0 ± 2.8 (n=2) | 0.5 |" in miniature.markdown(summary)
    assert "| batch2 | BN-ReLU | - | - | - |" in miniature.markdown(summary)
    loss = lambda run: dict(map(tuple, run["loss"]))  # noqa: E731
    series = miniature.mean_series(s0, loss)  # the images seen that both seeds logged
    assert (list(series.x), list(series.y), series.label) == ([160, 320], [2.5, 1.5], "EvoNorm-S0: box AP 22.0 ± 2.8 (n=2)")
    assert list(series.err) == pytest.approx([2 ** -0.5] * 2) and miniature.mean_series(bn2, loss) is None
    assert miniature.plot_losses(summary, tmp_path / "loss.png").stat().st_size > 0
    assert miniature.plot_validation(summary, tmp_path / "validation.png").stat().st_size > 0


def test_miniature_main_writes_the_summary_and_the_loss_plot(tmp_path, capsys):
    argv = ["--report-only", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match=rf"no finished run under {tmp_path / 'runs' / '14400_images'} "):
        miniature.main(argv)  # a folder without runs: the committed summary is not replaced by an empty one
    assert not (tmp_path / "out").exists()
    folder = miniature.Run(miniature.SETTINGS[0], "gn", 0).output_dir(tmp_path / "runs", miniature.ITERATIONS)
    folder.mkdir(parents=True)
    (folder / report.RESULTS_FILE).write_text(json.dumps({"bbox": {"AP": 30.0, "AP50": 50.0},
                                                          "segm": {"AP": 28.0, "AP50": 48.0}}))
    write_metrics(folder, [{"iteration": 19, "total_loss": 2.0}, {"iteration": 1800, "bbox/AP": 30.0, "segm/AP": 28.0}])
    assert miniature.main(argv) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"miniature.json", miniature.LOSS_PLOT}
    assert "validation curves: fewer than 2 evaluations a run (no plot)" in capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "miniature.json").read_text())
    assert summary["iterations"] == miniature.ITERATIONS == 1800
    assert [(c["setting"], c["layer"], len(c["runs"])) for c in summary["cells"] if c["runs"]] == [("batch8", "gn", 1)]
    (folder / report.RESULTS_FILE).write_text('{"bbox": {"AP": 3')  # cut short: named in one line
    with pytest.raises(SystemExit, match=rf"^error: .*{folder / report.RESULTS_FILE}' is not valid JSON"):
        miniature.main(argv)
    (folder / report.RESULTS_FILE).write_text(json.dumps({"bbox": {"AP": 30.0, "AP50": 50.0}}))  # no masks
    with pytest.raises(SystemExit, match=rf"^error: COCO results '{folder / report.RESULTS_FILE}' hold no 'segm' "
                                         r"metrics \(AP, AP50\); evaluate the run again"):
        miniature.main(argv)


@pytest.mark.parametrize("content, lacking", [("[]", "'bbox'"), ('{"bbox": {"AP": 1.0}}', "'bbox'"),
                                              ('{"coco_2017_val": {"segm": {"AP": 1.0, "AP50": 2.0}}}', "'bbox'")])
def test_report_names_results_without_the_metrics_it_reads(tmp_path, content, lacking):
    (tmp_path / report.RESULTS_FILE).write_text(content)
    with pytest.raises(CorruptFileError, match=rf"'{tmp_path / report.RESULTS_FILE}' hold no {lacking} metrics"):
        report.load_results(tmp_path)


def test_the_reproduction_runs_the_miniature_at_its_default_length():
    reproduce = load("reproduce")
    assert reproduce.TABLE4_ITERATIONS == miniature.ITERATIONS
    command = reproduce.STEPS["table4"].commands[0]
    assert command[command.index("--iterations") + 1] == str(miniature.ITERATIONS)


def test_miniature_settings_must_divide_the_base_batch():
    with pytest.raises(ValueError, match="images per step must divide 8, got 3"):
        miniature.Setting("batch3", 3)


# Table 4 of the full paper (002_*), typed from the text row by row: box AP/AP50/AP75, mask AP/AP50/AP75,
# MAdds (B), params (M); the "(+1.9)" improvements dropped.
PAPER_TABLE4 = """
R-50-FPN BN-ReLU 42.1 62.9 46.2 37.8 60.0 40.6 332.0 46.37
R-50-FPN EvoNorm-B0 44.0 65.2 48.1 39.5 62.7 42.4 332.3 46.38
R-50-FPN GN-ReLU 42.7 63.8 46.6 38.4 61.2 41.2 332.3 46.37
R-50-FPN EvoNorm-S0 43.6 64.9 47.9 39.4 62.3 42.7 331.9 46.38
R-101-FPN BN-ReLU 43.8 64.2 48.2 39.2 61.3 42.5 409.8 65.36
R-101-FPN EvoNorm-B0 45.1 66.2 49.0 40.1 63.3 43.1 410.1 65.38
R-101-FPN GN-ReLU 44.0 64.7 48.3 39.4 62.1 42.7 410.3 65.36
R-101-FPN EvoNorm-S0 44.5 65.3 48.7 39.6 62.3 42.6 409.7 65.38
"""


def test_table4_holds_the_papers_numbers_and_each_config_its_row():
    expected = {(backbone, layer): tuple(float(v) for v in values)
                for backbone, layer, *values in (line.split() for line in PAPER_TABLE4.strip().splitlines())}
    assert dict(TABLE4.rows) == expected and list(TABLE4.rows) == list(expected)
    assert TABLE4.columns == ("box AP", "box AP50", "box AP75", "mask AP", "mask AP50", "mask AP75", "MAdds (B)",
                              "params (M)")
    labels = {"bn": "BN-ReLU", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0"}
    assert CONFIG_ROWS == {f"mask_rcnn_R{d}_{k}": (f"R-{d}-FPN", v) for d in (50, 101) for k, v in labels.items()}
    assert paper_cells("configs/mask_rcnn_R101_gn.yaml", ("mask AP", "params (M)")) == (39.4, 65.36)
    assert paper_cells("output/mask_rcnn_R50_evonorm_s0", ("box AP75",)) == (47.9,)
    assert paper_cells("output/demo_shapes_gn", ("box AP", "mask AP")) == (None, None)


def write_metrics(folder, entries):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text("\n".join(json.dumps(e) for e in entries))


def test_report_reads_final_results_or_the_last_logged_evaluation(tmp_path):
    """``final_results.json`` as COCOEvaluator writes it ({task: ...} or {dataset: {task: ...}}); without it the
    LAST evaluation in metrics.json (a run still training), split into bbox and segm; AP to one decimal."""
    nested = tmp_path / "mask_rcnn_R50_gn"
    nested.mkdir()
    (nested / report.RESULTS_FILE).write_text(json.dumps(
        {"coco_2017_val": {"bbox": {"AP": 40.04, "AP50": 60.0, "AP75": 44.0}, "segm": {"AP": 35.0, "AP50": 55.5}}}))
    assert report.load_results(nested)["bbox"]["AP"] == 40.04
    logged = tmp_path / "demo_shapes_bn"
    write_metrics(logged, [
        {"iteration": 9, "bbox/AP": 1.0, "bbox/AP50": 2.0, "bbox/AP75": 3.0, "segm/AP": 4.0},
        {"iteration": 10, "total_loss": 2.5},
        {"iteration": 19, "bbox/AP": 11.0, "bbox/AP50": 12.0, "bbox/AP75": 13.0, "segm/AP": 14.0, "segm/AP50": 15.0,
         "lr": 0.1},
        {"iteration": 20, "total_loss": 1.5},
    ])
    assert report.load_results(logged) == {"bbox": {"AP": 11.0, "AP50": 12.0, "AP75": 13.0},
                                           "segm": {"AP": 14.0, "AP50": 15.0}}
    assert report.training_curve(logged) == ([10, 20], [2.5, 1.5])
    rows = report.report_rows([nested, logged])
    assert rows[0] == ["mask_rcnn_R50_gn", "40.0 / 60.0 / 44.0", "42.7 / 63.8 / 46.6", "35.0 / 55.5 / -",
                       "38.4 / 61.2 / 41.2"]
    assert rows[1] == ["demo_shapes_bn", "11.0 / 12.0 / 13.0", "- / - / -", "14.0 / 15.0 / -", "- / - / -"]
    write_metrics(tmp_path / "untested", [{"iteration": 5, "total_loss": 3.0}])
    with pytest.raises(FileNotFoundError, match="no evaluation in .*untested"):
        report.load_results(tmp_path / "untested")


def test_scale_jitter_flips_resizes_and_crops_to_the_configs_square():
    """``INPUT.LSJ``: horizontal flip, ResizeScale between MIN_SCALE and MAX_SCALE of IMAGE_SIZE, then a fixed
    IMAGE_SIZE x IMAGE_SIZE crop (padded); disabled, detectron2's ResizeShortestEdge and flip."""
    cfg = load_config(str(CONFIGS / "demo_shapes_evonorm_s0.yaml"), [
        "INPUT.LSJ.IMAGE_SIZE", "96", "INPUT.LSJ.MIN_SCALE", "0.5", "INPUT.LSJ.MAX_SCALE", "1.5"])
    flip, resize, crop = train_augmentations(cfg)
    assert isinstance(flip, T.RandomFlip) and flip.horizontal and not flip.vertical and flip.prob == 0.5
    assert isinstance(resize, T.ResizeScale)
    assert (resize.min_scale, resize.max_scale, resize.target_height, resize.target_width) == (0.5, 1.5, 96, 96)
    assert isinstance(crop, T.FixedSizeCrop) and tuple(crop.crop_size) == (96, 96) and crop.pad
    cfg.INPUT.LSJ.ENABLED = False
    assert [type(a) for a in train_augmentations(cfg)] == [T.ResizeShortestEdge, T.RandomFlip]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_mapper_recomputes_boxes_from_the_cropped_masks(tmp_path, monkeypatch, seed):
    """MASK_ON with INPUT.LSJ: after the crop the gt boxes are the tight boxes of the cropped masks
    (detectron2's DatasetMapper ``recompute_boxes``), not the annotation's box clipped to the crop.

    A 32x32 image is scaled 2x to 64x64 and cropped to 32x32 at a random offset; the instance is a
    horizontal bar 56 px wide and 8 px tall after scaling (wider than every crop, so always cut) with a
    loose annotation box (the whole image), so a clipped box would be the whole crop."""
    monkeypatch.setattr(data, "build_detection_train_loader", lambda cfg, mapper: mapper)
    cfg = load_config(str(CONFIGS / "demo_shapes_evonorm_s0.yaml"), [
        "INPUT.LSJ.IMAGE_SIZE", "32", "INPUT.LSJ.MIN_SCALE", "2.0", "INPUT.LSJ.MAX_SCALE", "2.0"])
    assert cfg.MODEL.MASK_ON and cfg.INPUT.LSJ.ENABLED
    mapper = data.build_train_loader(cfg)
    image = tmp_path / "image.png"
    Image.fromarray(np.full((32, 32, 3), 100, np.uint8)).save(image)
    bar = [2.0, 14.0, 30.0, 14.0, 30.0, 18.0, 2.0, 18.0]  # x in [2, 30], y in [14, 18]
    record = {"file_name": str(image), "height": 32, "width": 32, "image_id": 0, "annotations": [{
        "bbox": [0.0, 0.0, 32.0, 32.0], "bbox_mode": 1, "category_id": 0, "segmentation": [bar], "iscrowd": 0}]}
    np.random.seed(seed)
    instances = mapper(record)["instances"]
    assert len(instances) == 1 and instances.image_size == (32, 32)
    mask = instances.gt_masks.tensor[0]
    rows, cols = torch.nonzero(mask.any(dim=1))[:, 0], torch.nonzero(mask.any(dim=0))[:, 0]
    x0, y0, x1, y1 = cols.min().item(), rows.min().item(), cols.max().item() + 1, rows.max().item() + 1
    assert 0 < y1 - y0 <= 9 < 32  # the bar's 4 rows scaled 2x (or fewer where the crop cuts them)
    assert instances.gt_boxes.tensor[0].tolist() == [x0, y0, x1, y1]


def test_demo_grid_scales_the_lr_with_the_batch_and_keeps_the_stage_fractions(tmp_path):
    """Table 4 in miniature: batch 8 at the demo config's LR 0.02, batch 2 at 0.02 * 2 / 8 (linear scaling)
    for 4x the steps (the same images); the 10x decays at 80% and 93% of the steps (about the demo config's
    240 and 280 of 300) and the warmup over the demo's 50 steps of 8 images."""
    settings = [(s.name, s.images_per_step, s.lr, s.iterations(300), s.warmup()) for s in miniature.SETTINGS]
    assert settings == [("batch8", 8, 0.02, 300, 50), ("batch2", 2, 0.005, 1200, 200)]
    cfg = load_config(str(CONFIGS / "demo_shapes_bn.yaml"))
    assert (cfg.SOLVER.IMS_PER_BATCH, cfg.SOLVER.BASE_LR, tuple(cfg.SOLVER.STEPS), cfg.SOLVER.MAX_ITER,
            cfg.SOLVER.WARMUP_ITERS) == (miniature.BASE_BATCH, miniature.BASE_LR, (240, 280), 300, miniature.BASE_WARMUP)
    command = miniature.Run(miniature.SETTINGS[0], "gn", 0).command(tmp_path, 1000)
    values = dict(zip(command[command.index("SEED")::2], command[command.index("SEED") + 1::2]))
    assert values["SOLVER.STEPS"] == "(800, 930)" and values["SOLVER.MAX_ITER"] == "1000"
    assert float(values["SOLVER.BASE_LR"]) == 0.02 and values["SOLVER.IMS_PER_BATCH"] == "8"
    assert values["SOLVER.WARMUP_ITERS"] == "50"


def test_checkpoints_kept_bounds_the_periodic_checkpoints_on_disk(datasets_root, tmp_path):
    """SOLVER.CHECKPOINTS_KEPT 1 with a checkpoint every step: only the newest periodic checkpoint stays (with
    model_final.pth and the last_checkpoint pointer); 0 keeps them all, as detectron2 does."""
    val = register_shapes_dataset()[1]
    config = str(CONFIGS / "demo_shapes_gn.yaml")
    for kept, expected in ((1, {"model_0000002.pth"}), (0, {"model_0000000.pth", "model_0000001.pth", "model_0000002.pth"})):
        output = tmp_path / f"kept{kept}"
        args = ["--threads", "2", "--config", config, *TINY, "OUTPUT_DIR", str(output), "SOLVER.MAX_ITER", "3",
                "DATASETS.TEST", f"('{first_images(val, 1)}',)", "SOLVER.CHECKPOINT_PERIOD", "1",
                "SOLVER.CHECKPOINTS_KEPT", str(kept)]
        assert train_net.main(args) == 0
        assert {p.name for p in output.glob("model_*.pth")} == expected | {"model_final.pth"}


def test_precise_bn_recomputes_the_suites_layers_before_the_final_evaluation(datasets_root, tmp_path):
    """TEST.PRECISE_BN with EvoNorm-B0: detectron2's own hook finds no nn.BatchNorm and switches itself
    off; the trainer's replaces it, recomputes every batch-statistics layer before the checkpoint and the
    final evaluation, and the checkpoint holds the recomputed averages."""
    output = tmp_path / "precise"
    val = register_shapes_dataset()[1]
    config = str(CONFIGS / "demo_shapes_evonorm_b0.yaml")
    args = ["--threads", "2", "--config", config, *TINY, "OUTPUT_DIR", str(output), "SOLVER.MAX_ITER", "2",
            "DATASETS.TEST", f"('{first_images(val, 3)}',)", "TEST.PRECISE_BN.ENABLED", "True",
            "TEST.PRECISE_BN.NUM_ITER", "3"]
    assert train_net.main(args) == 0
    log = (output / "log.txt").read_text()
    model = build_model(load_config(config, [*TINY, "MODEL.DEVICE", "cpu"]))
    layers = len(running_stats.batch_statistics_layers(model))
    assert layers > 0
    line = f"precise batch statistics: the moving averages of {layers} layers recomputed over 3 batches"
    assert log.count(line) == 1 and log.index(line) < log.index("Evaluation results for bbox")
    state = torch.load(output / "model_final.pth", weights_only=True)["model"]
    counts = {k: int(v) for k, v in state.items() if k.endswith("num_batches_tracked")}
    # a cumulative average over the 3 batches; the RPN head's norm runs once per FPN level (5) in each
    rpn = {k for k in counts if k.startswith("proposal_generator.rpn_head")}
    assert rpn and all(counts[k] == 15 for k in rpn) and all(counts[k] == 3 for k in counts.keys() - rpn)
