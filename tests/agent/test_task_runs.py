"""Tasks through the agent end to end: the reference text classifier (BERT's three inputs,
through its tokenizer), the shapes segmenter (images and PNG masks), the shapes detector (a
COCO file) and the denoiser (noisy and clean image folders), in ONNX Runtime, PyTorch and
TensorFlow, their metrics checked against scikit-learn, torchmetrics, pycocotools and
scikit-image called directly on the same model's outputs; and the mistakes a user makes, each
refused naming the field or file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from PIL import Image

from mlmodelscope.agent.runner import EvaluationError, evaluate
from mlmodelscope.agent.tasks.feeds import model_feeds
from mlmodelscope.agent.tasks.reference import ensure_task_models
from mlmodelscope.agent.tasks.tokens import load_tokenizer, tokenize
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.spec import SpecError, load_evaluations
from mlmodelscope.spec.evaluation import DType, TensorSpec
from upscaler import write_upscaler

pytestmark = pytest.mark.frameworks

EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"
QUICK = {"type": "SingleStream", "batchSizes": [1, 8], "minQueryCount": 20, "minDuration": "20ms"}
FORMATS = {
    "onnxruntime": ("onnx", ".onnx"),
    "pytorch": ("torchscript", ".torchscript.pt"),
    "tensorflow": ("savedmodel", ".savedmodel"),
}


@pytest.fixture(scope="module")
def models() -> Path:
    return ensure_task_models()


def example(name: str, models: Path, framework: str = "onnxruntime") -> dict[str, Any]:
    """examples/tasks/<name>.yaml with build/ pointing at the cached models."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    spec = doc["spec"]
    fmt, suffix = FORMATS[framework]
    stem = Path(spec["model"]["uri"]).name.split(".")[0]
    spec["model"].update(uri=str(models / f"{stem}{suffix}"), format=fmt)
    spec["framework"]["name"] = framework
    for key in ("path", "masks", "targets", "tokenizer", "annotations"):
        if key in spec["dataset"]:
            spec["dataset"][key] = str(models / spec["dataset"][key].removeprefix("build/"))
    spec["scenario"] = dict(QUICK)
    doc["metadata"]["name"] = f"{name}-{framework}"
    return doc


def run(doc: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    [loaded] = load_evaluations(path)
    document = evaluate(loaded, output=tmp_path / "result.json").document
    ResultDocument.model_validate(document)
    return document


def failure(doc: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    [loaded] = load_evaluations(path)
    with pytest.raises(EvaluationError) as caught:
        evaluate(loaded, output=tmp_path / "bad.json")
    error: dict[str, Any] = caught.value.document["error"]
    assert caught.value.document["status"] == "Failed"
    return error


# ------------------------------------------------------------------------ text classification


def test_text_classification_with_three_inputs_agrees_with_scikit_learn(
    models: Path, tmp_path: Path
) -> None:
    """The three frameworks on the same weights: accuracy and macro-F1 equal to scikit-learn's
    on the model's own outputs, the frameworks within 0.5 points, and the headline row naming
    the metric."""
    from sklearn.metrics import accuracy_score, f1_score

    rows = [json.loads(line) for line in (models / "text" / "eval.jsonl").read_text().splitlines()]
    names = sorted({r["label"] for r in rows})
    labels = np.array([names.index(r["label"]) for r in rows])
    tokens = tokenize(
        load_tokenizer(models / "text" / "tokenizer.json"), [r["text"] for r in rows], 32
    )
    session = ort.InferenceSession(str(models / "text-classifier.onnx"))
    logits = session.run(None, tokens.fields)[0]
    want_accuracy = accuracy_score(labels, logits.argmax(1))
    want_f1 = f1_score(labels, logits.argmax(1), labels=list(range(4)), average="macro")

    found = {}
    for framework in FORMATS:
        document = run(example("text-classification", models, framework), tmp_path)
        task = document["task"]
        assert task["type"] == "text-classification" and task["primary"] == "accuracy"
        found[framework] = task["metrics"]["accuracy"]
        assert document["dataset"]["truncated"] == tokens.truncated > 0
        assert document["results"][0]["metric"] == "accuracy"
        assert document["results"][0]["metric_value"] == task["metrics"]["accuracy"]
        if framework == "onnxruntime":
            assert task["metrics"]["accuracy"] == pytest.approx(want_accuracy, abs=1e-6)
            assert task["metrics"]["macro_f1"] == pytest.approx(want_f1, abs=1e-6)
    assert found["onnxruntime"] > 0.9
    assert max(found.values()) - min(found.values()) <= 0.005, found


def test_tokenizing_truncates_inside_the_special_tokens(models: Path) -> None:
    tokenizer = load_tokenizer(models / "text" / "tokenizer.json")
    long, short = "rain " * 50, "rain snow"
    tokens = tokenize(tokenizer, [long, short], 8)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    ids, mask = tokens.fields["input_ids"], tokens.fields["attention_mask"]
    assert ids[0, 0] == cls and ids[0, -1] == sep and mask[0].all()
    words = [tokenizer.token_to_id(w) for w in short.split()]
    assert ids[1, :4].tolist() == [cls, *words, sep]
    assert mask[1].tolist() == [1, 1, 1, 1, 0, 0, 0, 0] and (ids[1, 4:] == 0).all()
    assert tokens.truncated == 1 and len(tokens.latencies_ns) == 2


def test_model_feeds_cast_ids_and_masks_and_refuse_floats() -> None:
    fields = {"input_ids": np.ones((2, 4), dtype=np.int64), "attention_mask": np.ones((2, 4))}
    ids = TensorSpec(name="ids", shape=[-1, 4], dtype=DType.INT32, field="input_ids")
    mask = TensorSpec(name="attention_mask", shape=[-1, -1], dtype=DType.BOOL)
    fed = model_feeds([ids, mask], fields)
    assert fed[0].dtype == np.int32 and fed[1].dtype == np.bool_
    with pytest.raises(SpecError, match=r"declare int64, int32") as caught:
        model_feeds([TensorSpec(name="input_ids", shape=[-1, 4])], fields)
    assert caught.value.field == "spec.model.inputs[0].dtype"
    with pytest.raises(SpecError, match=r"takes \[-1, 8\]") as caught:
        model_feeds([TensorSpec(name="input_ids", shape=[-1, 8], dtype=DType.INT64)], fields)
    assert caught.value.field == "spec.model.inputs[0].shape"


# ------------------------------------------------------------------------------ segmentation


def test_segmentation_miou_equals_torchmetrics_on_the_same_predictions(
    models: Path, tmp_path: Path
) -> None:
    """mIoU and pixel accuracy of the run equal torchmetrics' on the model's own predictions
    (ONNX Runtime called directly on the images); PyTorch and TensorFlow within 0.5 points."""
    import torch
    from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

    images = sorted((models / "shapes" / "images").glob("*.png"))
    x = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in images])
    x = (x.astype(np.float32) * np.float32(1 / 255)).transpose(0, 3, 1, 2)
    masks = np.stack([np.asarray(Image.open(models / "shapes" / "masks" / p.name)) for p in images])
    session = ort.InferenceSession(str(models / "segmenter.onnx"))
    predicted = session.run(None, {"input": x})[0].argmax(1)
    jaccard = MulticlassJaccardIndex(num_classes=4, average="macro", ignore_index=255)
    pixels = MulticlassAccuracy(num_classes=4, average="micro", ignore_index=255)
    want_miou = float(jaccard(torch.from_numpy(predicted), torch.from_numpy(masks).long()))
    want_pixels = float(pixels(torch.from_numpy(predicted), torch.from_numpy(masks).long()))

    found = {}
    for framework in FORMATS:
        document = run(example("segmentation", models, framework), tmp_path)
        metrics = document["task"]["metrics"]
        found[framework] = metrics["miou"]
        assert document["results"][0]["metric"] == "miou"
        assert document["accuracy"]["top1"] is None
        assert document["task"]["postprocessing_per_sample_s"] > 0
        assert document["task"]["metrics_s"] >= 0
        if framework == "onnxruntime":
            assert metrics["miou"] == pytest.approx(want_miou, abs=1e-6)
            assert metrics["pixel_accuracy"] == pytest.approx(want_pixels, abs=1e-6)
    assert found["onnxruntime"] > 0.35
    assert max(found.values()) - min(found.values()) <= 0.005, found


def test_a_missing_mask_is_skipped_and_counted_only_when_allowed(
    models: Path, tmp_path: Path
) -> None:
    masks = tmp_path / "masks"
    shutil.copytree(models / "shapes" / "masks", masks)
    (masks / "00003.png").unlink()
    doc = example("segmentation", models)
    doc["spec"]["dataset"]["masks"] = str(masks)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.masks" and "00003.png" in error["message"]
    doc["spec"]["dataset"]["skipMissing"] = True
    document = run(doc, tmp_path)
    assert document["task"]["skipped"] == document["dataset"]["skipped"] == 1
    assert document["dataset"]["samples"] == 63


def test_a_mask_of_the_wrong_size_names_the_file(models: Path, tmp_path: Path) -> None:
    masks = tmp_path / "masks"
    shutil.copytree(models / "shapes" / "masks", masks)
    Image.new("L", (10, 10)).save(masks / "00005.png")
    doc = example("segmentation", models)
    doc["spec"]["dataset"]["masks"] = str(masks)
    error = failure(doc, tmp_path)
    assert "00005.png" in error["message"] and "10x10" in error["message"]


# ---------------------------------------------------------------------- the user's mistakes


@pytest.mark.parametrize(
    ("name", "change", "field", "words"),
    [
        (
            "text-classification",
            lambda s: s["dataset"].update(tokenizer="/nonexistent/tokenizer.json"),
            "spec.dataset.tokenizer",
            "no such tokenizer file",
        ),
        (
            "text-classification",
            lambda s: s["model"]["inputs"][1].update(name="mask"),
            "spec.model.inputs[1].name",
            "no field 'mask'",
        ),
        (
            "text-classification",
            lambda s: s["model"]["inputs"][0].update(dtype="float32"),
            "spec.model.inputs[0].dtype",
            "token ids",
        ),
        (
            "text-classification",
            lambda s: s["task"].update(output="probabilities"),
            "spec.task.output",
            "not one of spec.model.outputs",
        ),
        (
            "segmentation",
            lambda s: s["task"].update(numClasses=7),
            "spec.task.output",
            "numClasses must match",
        ),
        (
            "image-to-image",
            lambda s: s["task"].update(output="denoised"),
            "spec.task.output",
            "'denoised' is not one of spec.model.outputs",
        ),
        (
            "image-to-image",
            lambda s: s["model"]["outputs"][0].update(layout="NHWC"),
            "spec.task.output",
            "the output is [8, 3, 48, 48] float32 (declared NHWC)",
        ),
    ],
)
def test_mistakes_fail_naming_the_field(
    models: Path, tmp_path: Path, name: str, change: Any, field: str, words: str
) -> None:
    doc = example(name, models)
    change(doc["spec"])
    error = failure(doc, tmp_path)
    assert error["field"] == field and words in error["message"], error


def test_a_malformed_text_file_names_its_line(models: Path, tmp_path: Path) -> None:
    bad = tmp_path / "eval.jsonl"
    bad.write_text('{"text": "rain", "label": "weather"}\n{"text": oops\n')
    doc = example("text-classification", models)
    doc["spec"]["dataset"]["path"] = str(bad)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.path" and "line 2 is not JSON" in error["message"]


def test_the_text_file_as_parquet_gives_the_same_evaluation(models: Path, tmp_path: Path) -> None:
    """eval.jsonl's rows written as Parquet (string labels, three row groups, a column the
    run ignores): the same samples, so the same metrics and truncation."""
    pa = pytest.importorskip("pyarrow", reason="pip install 'mlmodelscope[parquet]'")
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (models / "text" / "eval.jsonl").read_text().splitlines()]
    parquet = tmp_path / "eval.parquet"
    columns = {
        "id": list(range(len(rows))),
        "text": [r["text"] for r in rows],
        "label": [r["label"] for r in rows],
    }
    pq.write_table(pa.table(columns), parquet, row_group_size=150)
    want = run(example("text-classification", models), tmp_path)
    doc = example("text-classification", models)
    doc["spec"]["dataset"]["path"] = str(parquet)
    got = run(doc, tmp_path)
    timings = ("metrics_s", "postprocessing_per_sample_s")
    same = {k: v for k, v in got["task"].items() if k not in timings}
    assert same == {k: v for k, v in want["task"].items() if k not in timings}
    assert got["task"]["metrics"]["accuracy"] > 0.9
    assert got["dataset"]["samples"] == want["dataset"]["samples"] == len(rows)
    assert got["dataset"]["labelled"] and got["dataset"]["type"] == "text"
    assert got["dataset"]["truncated"] == want["dataset"]["truncated"] > 0
    assert got["dataset"]["name"] == f"text:{parquet}"


def test_the_docs_commands_run_the_examples_as_written(models: Path) -> None:
    """docs/tasks.md's commands, from the repository root, with the build link it makes."""
    import subprocess
    import sys

    from mlmodelscope.agent.digits import link_folder

    root = EXAMPLES.parents[1]
    doc = (root / "docs" / "tasks.md").read_text()
    commands = [
        line.split()
        for line in doc.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
        if line.strip()
    ]
    assert commands[0][1:] == ["-m", "mlmodelscope.agent.tasks", "--link", "examples/tasks/build"]
    link_folder(root / "examples" / "tasks" / "build", models)
    for command in commands[1:]:
        assert command[0] == ".venv/bin/mlms"
        done = subprocess.run(
            [sys.executable, "-m", "mlmodelscope", *command[1:]],
            cwd=root, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        metric = {
            "segmentation": "miou",
            "detection": "map",
            "text-classification": "accuracy",
            "image-to-image": "psnr",
        }
        assert metric[Path(command[2]).stem] in done.stdout


# --------------------------------------------------------------------------------- detection


def test_detection_map_equals_cocoeval_on_the_same_boxes(models: Path, tmp_path: Path) -> None:
    """The run's COCO AP equals pycocotools' COCOeval called directly on the detector's own
    boxes (ONNX Runtime on the images, decoded and suppressed here); PyTorch and TensorFlow
    within 0.5 points."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from mlmodelscope.agent.tasks.detection import Detections, class_wise_nms

    truth_path = models / "shapes" / "instances.json"
    truth = json.loads(truth_path.read_text())
    session = ort.InferenceSession(str(models / "detector.onnx"))
    results = []
    for entry in truth["images"]:
        image = np.asarray(Image.open(models / "shapes" / "images" / entry["file_name"]))
        x = (image.astype(np.float32) * np.float32(1 / 255)).transpose(2, 0, 1)[None]
        boxes, scores, classes = (a[0] for a in session.run(None, {"input": x}))
        size = np.array([entry["width"], entry["height"]] * 2, dtype=np.float64)
        xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], 1)
        found = class_wise_nms(
            Detections(xyxy * size, scores.astype(np.float64), classes.astype(np.int64)),
            iou_threshold=0.5, score_threshold=0.05, max_detections=100,
        )  # fmt: skip
        for box, score, label in zip(found.boxes, found.scores, found.labels, strict=True):
            results.append(
                {"image_id": entry["id"], "category_id": int(label), "score": float(score),
                 "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]}
            )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        ground = COCO(str(truth_path))
        evaluation = COCOeval(ground, ground.loadRes(results), iouType="bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()

    found_map = {}
    for framework in FORMATS:
        document = run(example("detection", models, framework), tmp_path)
        metrics = document["task"]["metrics"]
        found_map[framework] = metrics["map"]
        assert document["task"]["primary"] == "map" and document["results"][0]["metric"] == "map"
        if framework == "onnxruntime":
            assert metrics["map"] == pytest.approx(evaluation.stats[0], abs=1e-6)
            assert metrics["ap50"] == pytest.approx(evaluation.stats[1], abs=1e-6)
            assert metrics["ap75"] == pytest.approx(evaluation.stats[2], abs=1e-6)
    assert found_map["onnxruntime"] > 0.25
    assert max(found_map.values()) - min(found_map.values()) <= 0.005, found_map


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            lambda s: s["task"]["detection"].update(categoryIds=[7]),
            "spec.task.detection.categoryIds",
            "categoryIds does not map",
        ),
        (
            lambda s: s["task"]["detection"].update(scores="confidence"),
            "spec.task.detection.scores",
            "not one of spec.model.outputs",
        ),
        (
            lambda s: s.update(
                preprocessing=[
                    s["preprocessing"][0],
                    {"resize": {"height": 56, "width": 56}},
                    {"centerCrop": {"height": 48, "width": 48}},
                    *s["preprocessing"][1:],
                ]
            ),
            "spec.preprocessing",
            "centerCrop",
        ),
        (
            lambda s: s["dataset"].update(annotations="/nonexistent/instances.json"),
            "spec.dataset.annotations",
            "no such file",
        ),
    ],
)
def test_detection_mistakes_fail_naming_the_field(
    models: Path, tmp_path: Path, change: Any, field: str, words: str
) -> None:
    doc = example("detection", models)
    change(doc["spec"])
    error = failure(doc, tmp_path)
    assert error["field"] == field and words in error["message"], error


def test_a_malformed_coco_file_or_a_missing_image_names_the_file(
    models: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "instances.json"
    broken.write_text('{"images": [')
    doc = example("detection", models)
    doc["spec"]["dataset"]["annotations"] = str(broken)
    error = failure(doc, tmp_path)
    assert str(broken) in error["message"] and "not JSON" in error["message"]
    images = tmp_path / "images"
    shutil.copytree(models / "shapes" / "images", images)
    (images / "00002.png").unlink()
    doc["spec"]["dataset"].update(annotations=str(models / "shapes" / "instances.json"))
    doc["spec"]["dataset"]["path"] = str(images)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.path" and "00002.png" in error["message"]


def test_a_task_and_its_dataset_come_in_pairs(models: Path, tmp_path: Path) -> None:
    """The spec refuses a detection task without a coco dataset and the reverse, before
    anything runs (the same rule the API server applies)."""
    doc = example("detection", models)
    doc["spec"]["task"] = {"type": "classification"}
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception, match="a coco dataset one of them"):
        load_evaluations(path)


# ---------------------------------------------------------------------------- image to image


def read_pairs(models: Path) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation pairs as float64 [N, H, W, 3] in [0, 1]: noisy inputs, clean targets."""
    names = sorted(p.name for p in (models / "pairs" / "noisy").iterdir())
    noisy, clean = (
        np.stack([np.asarray(Image.open(models / "pairs" / kind / n)) for n in names]) / 255.0
        for kind in ("noisy", "clean")
    )
    return noisy, clean


def skimage_quality(outputs: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Mean PSNR and SSIM of [N, H, W, C] images, by scikit-image called directly."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    pairs = list(zip(outputs, targets, strict=True))
    psnr = [peak_signal_noise_ratio(t, o, data_range=1.0) for o, t in pairs]
    ssim = [
        structural_similarity(
            t, o, data_range=1.0, channel_axis=-1, gaussian_weights=True, sigma=1.5,
            use_sample_covariance=False,
        )
        for o, t in pairs
    ]  # fmt: skip
    return float(np.mean(psnr)), float(np.mean(ssim))


@pytest.fixture(scope="module")
def restored(models: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The image-to-image example's result document in each framework."""
    folder = tmp_path_factory.mktemp("image-to-image")
    return {
        framework: run(example("image-to-image", models, framework), folder)
        for framework in FORMATS
    }


def test_image_to_image_psnr_and_ssim_equal_scikit_image_on_the_same_outputs(
    models: Path, restored: dict[str, dict[str, Any]]
) -> None:
    """The run's PSNR and SSIM equal scikit-image's on the denoiser's own outputs (ONNX
    Runtime called directly on the noisy images, clipped to [0, 1]); the three frameworks
    agree to 0.01 dB; and the model really denoises: its PSNR is well above the noisy
    inputs'."""
    noisy, clean = read_pairs(models)
    x = noisy.astype(np.float32).transpose(0, 3, 1, 2)
    session = ort.InferenceSession(str(models / "denoiser.onnx"))
    outputs = np.clip(session.run(None, {"input": x})[0].transpose(0, 2, 3, 1), 0.0, 1.0)
    want_psnr, want_ssim = skimage_quality(outputs.astype(np.float64), clean)
    noisy_psnr, noisy_ssim = skimage_quality(noisy, clean)

    found = {}
    for framework, document in restored.items():
        task = document["task"]
        assert task["type"] == "image-to-image" and task["primary"] == "psnr"
        assert task["output"] == "restored" and task["metrics"]["images"] == 64
        assert task["metrics"]["identical"] == 0
        assert document["accuracy"]["top1"] is None
        assert document["results"][0]["metric"] == "psnr"
        assert document["results"][0]["metric_value"] == task["metrics"]["psnr"]
        assert task["postprocessing_per_sample_s"] > 0 and task["metrics_s"] > 0
        found[framework] = (task["metrics"]["psnr"], task["metrics"]["ssim"])
    assert found["onnxruntime"][0] == pytest.approx(want_psnr, abs=1e-6)
    assert found["onnxruntime"][1] == pytest.approx(want_ssim, abs=1e-6)
    psnrs = [p for p, _ in found.values()]
    ssims = [q for _, q in found.values()]
    assert max(psnrs) - min(psnrs) <= 0.01, found
    assert max(ssims) - min(ssims) <= 1e-4, found
    assert want_psnr > noisy_psnr + 5 and want_ssim > noisy_ssim, (want_psnr, noisy_psnr)


def test_psnr_reads_in_decibels_in_compare_and_the_report(
    restored: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """PSNR is no fraction: `mlms compare` and the HTML report show it as 'psnr 28.75 dB'."""
    from rich.console import Console
    from typer.testing import CliRunner

    from mlmodelscope.cli import app
    from mlmodelscope.contract.metric import format_metric
    from mlmodelscope.report.compare import compare, load_result
    from mlmodelscope.report.render import render

    assert format_metric("psnr", 28.314) == "psnr 28.31 dB"
    assert format_metric("psnr", 28.314, with_name=False) == "28.31 dB"
    files = []
    for framework, document in restored.items():
        files.append(tmp_path / f"{framework}.json")
        files[-1].write_text(json.dumps(document))
    console = Console(width=300, record=True)
    render(console, compare([load_result(f) for f in files]))
    printed = console.export_text()
    psnr = restored["onnxruntime"]["task"]["metrics"]["psnr"]
    assert f"psnr {psnr:.2f} dB" in printed and "psnr 2" in printed
    assert f"{psnr:.2%}" not in printed
    output = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", *map(str, files), "--output", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text()
    assert f">psnr {psnr:.2f} dB<" in page and "psnr (dB)" in page


def test_a_missing_target_fails_naming_it_or_is_skipped_and_counted_when_allowed(
    models: Path, tmp_path: Path
) -> None:
    targets = tmp_path / "clean"
    shutil.copytree(models / "pairs" / "clean", targets)
    (targets / "00007.png").unlink()
    doc = example("image-to-image", models)
    doc["spec"]["dataset"]["targets"] = str(targets)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.targets" and "00007.png" in error["message"]
    assert "missing" in error["message"]
    doc["spec"]["dataset"]["skipMissing"] = True
    document = run(doc, tmp_path)
    assert document["task"]["skipped"] == document["dataset"]["skipped"] == 1
    assert document["dataset"]["samples"] == document["task"]["metrics"]["images"] == 63


def test_a_target_of_another_size_fails_naming_the_file(models: Path, tmp_path: Path) -> None:
    """A target whose size is not its input's (times the set's one factor) is refused when
    the dataset loads; a set of targets all twice the size (super-resolution) loads, and the
    pass refuses the 48x48 outputs, naming the first target."""
    targets = tmp_path / "clean"
    shutil.copytree(models / "pairs" / "clean", targets)
    Image.new("RGB", (10, 10)).save(targets / "00005.png")
    doc = example("image-to-image", models)
    doc["spec"]["dataset"]["targets"] = str(targets)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.targets", error
    assert "00005.png: 10x10 pixels" in error["message"] and "is 48x48" in error["message"]
    for path in targets.iterdir():
        Image.open(path).resize((96, 96)).save(path)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.targets", error
    assert "00000.png: 96x96 pixels, but the model's output for it is 48x48" in error["message"]


def test_a_truncated_target_fails_naming_it(models: Path, tmp_path: Path) -> None:
    """Its header reads (the dataset loads); its pixels do not, and the pass says which."""
    targets = tmp_path / "clean"
    shutil.copytree(models / "pairs" / "clean", targets)
    broken = targets / "00003.png"
    broken.write_bytes(broken.read_bytes()[:200])
    doc = example("image-to-image", models)
    doc["spec"]["dataset"]["targets"] = str(targets)
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.dataset.targets", error
    assert "00003.png: cannot be read as an image" in error["message"]


@pytest.mark.parametrize(
    ("name", "task"),
    [("text-classification", {"type": "image-to-image"}), ("image-to-image", {})],
)
def test_an_image_to_image_task_and_a_pairs_dataset_come_in_pairs(
    models: Path, tmp_path: Path, name: str, task: dict[str, Any]
) -> None:
    doc = example(name, models)
    doc["spec"]["task"] = task
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception, match="an image-to-image task needs a pairs dataset"):
        load_evaluations(path)


def luma_quality(outputs: np.ndarray, targets: np.ndarray, crop: int) -> tuple[float, float]:
    """Mean PSNR and SSIM of the BT.601 luma of RGB [N, H, W, 3] images in [0, 1], ``crop``
    pixels cut off every side, by scikit-image called directly (BasicSR's ``test_y_channel``
    and ``crop_border``)."""
    from skimage.color import rgb2ycbcr

    def luma(images: np.ndarray) -> np.ndarray:
        y = np.stack([rgb2ycbcr(image)[..., 0] / 255.0 for image in images])
        return y[:, crop:-crop, crop:-crop, None] if crop else y[..., None]

    return skimage_quality(luma(outputs), luma(targets))


def test_y_channel_after_a_border_crop_equals_scikit_image_in_bgr_too(
    models: Path, tmp_path: Path
) -> None:
    """channels: y and cropBorder: 3 score the denoiser's outputs as scikit-image scores
    their luma directly; with a channelOrder BGR step the output and target are BGR, and
    the pass turns them to RGB before the luma (else R and B would swap weights). The result
    records the options, and the document passes the published result schema."""
    import jsonschema

    from mlmodelscope.contract.schema import result_schema

    noisy, clean = read_pairs(models)
    session = ort.InferenceSession(str(models / "denoiser.onnx"))
    for order in ("RGB", "BGR"):
        doc = example("image-to-image", models)
        doc["metadata"]["name"] = f"luma-{order.lower()}"
        doc["spec"]["task"].update(channels="y", cropBorder=3)
        x = noisy.astype(np.float32)
        if order == "BGR":
            doc["spec"]["preprocessing"].insert(1, {"channelOrder": {"order": "BGR"}})
            x = x[..., ::-1]
        out = session.run(None, {"input": np.ascontiguousarray(x.transpose(0, 3, 1, 2))})[0]
        rgb = out.transpose(0, 2, 3, 1)[..., ::-1] if order == "BGR" else out.transpose(0, 2, 3, 1)
        want_psnr, want_ssim = luma_quality(np.clip(rgb, 0, 1).astype(np.float64), clean, 3)
        document = run(doc, tmp_path)
        metrics = document["task"]["metrics"]
        assert metrics["psnr"] == pytest.approx(want_psnr, abs=1e-6), order
        assert metrics["ssim"] == pytest.approx(want_ssim, abs=1e-6), order
        assert (metrics["crop_border"], metrics["channels"], metrics["images"]) == (3, "y", 64)
        jsonschema.Draft202012Validator(result_schema()).validate(document)


def super_resolution(models: Path, tmp_path: Path, channels: int = 3) -> dict[str, Any]:
    """The image-to-image example as 2x super-resolution: the clean 48x48 targets, their
    24x24 bicubic reductions as inputs, the upscaler as the model."""
    inputs = tmp_path / "small"
    inputs.mkdir(exist_ok=True)
    for target in sorted((models / "pairs" / "clean").iterdir()):
        Image.open(target).resize((24, 24), Image.Resampling.BICUBIC).save(inputs / target.name)
    write_upscaler(tmp_path / "upscaler.onnx", channels)
    doc = example("image-to-image", models)
    doc["metadata"]["name"] = "super-resolution"
    spec = doc["spec"]
    spec["model"].update(
        name="upscaler",
        uri=str(tmp_path / "upscaler.onnx"),
        inputs=[{"name": "input", "shape": [-1, channels, 24, 24]}],
        outputs=[{"name": "upscaled", "shape": [-1, channels, 48, 48], "layout": "NCHW"}],
    )
    spec["dataset"]["path"] = str(inputs)
    spec["task"] = {"type": "image-to-image", "output": "upscaled", "channels": "y",
                    "cropBorder": "scale"}  # fmt: skip
    return doc


def test_super_resolution_crops_the_sets_scale_factor_and_scores_the_luma(
    models: Path, tmp_path: Path
) -> None:
    """cropBorder: scale on a 2x pairs dataset cuts 2 pixels off every side: the run equals
    scikit-image on the upscaler's own outputs, luma and crop as BasicSR scores them."""
    doc = super_resolution(models, tmp_path)
    names = sorted(p.name for p in (models / "pairs" / "clean").iterdir())
    small = np.stack([np.asarray(Image.open(tmp_path / "small" / n)) for n in names]) / 255.0
    _, clean = read_pairs(models)
    session = ort.InferenceSession(str(tmp_path / "upscaler.onnx"))
    x = small.astype(np.float32).transpose(0, 3, 1, 2)
    outputs = np.clip(session.run(None, {"input": x})[0].transpose(0, 2, 3, 1), 0.0, 1.0)
    want_psnr, want_ssim = luma_quality(outputs.astype(np.float64), clean, 2)
    metrics = run(doc, tmp_path)["task"]["metrics"]
    assert metrics["psnr"] == pytest.approx(want_psnr, abs=1e-6)
    assert metrics["ssim"] == pytest.approx(want_ssim, abs=1e-6)
    assert (metrics["crop_border"], metrics["channels"]) == (2, "y")
    assert 20 < metrics["psnr"] < 40  # bilinear upscaling: close, not exact


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (
            lambda doc, tmp: doc["spec"]["task"].update(cropBorder=19),
            "spec.task.cropBorder",
            "cutting 19 pixels off every border of",
        ),
        (
            lambda doc, tmp: [
                Image.open(p).resize((36, 36)).save(p) for p in (tmp / "small").iterdir()
            ],
            "spec.task.cropBorder",
            "its targets are 4/3x their inputs, not a whole number",
        ),
    ],
    ids=["a crop leaving less than the SSIM window", "scale of a set that is not whole"],
)
def test_scoring_options_that_do_not_fit_fail_naming_the_option(
    models: Path, tmp_path: Path, change: Any, field: str, words: str
) -> None:
    doc = super_resolution(models, tmp_path)
    change(doc, tmp_path)
    error = failure(doc, tmp_path)
    assert error["field"] == field and words in error["message"], error


def test_the_luma_of_a_grey_output_is_refused_naming_channels(models: Path, tmp_path: Path) -> None:
    doc = super_resolution(models, tmp_path, channels=1)
    doc["spec"]["preprocessing"][0] = {"decode": {"mode": "L"}}
    error = failure(doc, tmp_path)
    assert error["field"] == "spec.task.channels", error
    assert "y scores the luma of RGB images" in error["message"]
    assert "is grey (one channel): score it with channels: rgb" in error["message"]
