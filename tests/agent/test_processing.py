"""Pre/post-processing: each step against hand-computed arrays, layout tracking, shape
inference before running, top-k/argmax/softmax and accuracy."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlmodelscope.agent.datasets import Samples
from mlmodelscope.agent.processing import (
    Postprocessor,
    Predictions,
    PreprocessError,
    Preprocessor,
    accuracy,
    infer_shape,
    preprocess_all,
    resize_hwc,
    softmax,
)
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import PostprocessStep, PreprocessStep, TensorSpec


def pre(*docs: dict[str, Any]) -> Preprocessor:
    return Preprocessor([PreprocessStep.model_validate(d) for d in docs])


def post(*docs: dict[str, Any], base_dir: Path | None = None) -> Postprocessor:
    return Postprocessor([PostprocessStep.model_validate(d) for d in docs], base_dir=base_dir)


def tensor(shape: list[int], dtype: str = "float32", layout: str | None = None) -> TensorSpec:
    return TensorSpec.model_validate(
        {"name": "input", "shape": shape, "dtype": dtype, "layout": layout}
    )


RGB = np.array(
    [[[255, 0, 0], [0, 255, 0], [0, 0, 255]], [[10, 20, 30], [40, 50, 60], [70, 80, 90]]],
    dtype=np.uint8,
)  # 2x3 HWC


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


# ------------------------------------------------------------------------------------ decode


def test_decode_rgb_from_path_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "img.png").write_bytes(png(RGB))
    from_path = pre({"decode": {}})(tmp_path / "img.png")
    from_bytes = pre({"decode": {"mode": "RGB"}})(png(RGB))
    assert from_path.dtype == np.uint8 and from_path.shape == (2, 3, 3)
    assert np.array_equal(from_path, RGB) and np.array_equal(from_bytes, RGB)


def test_decode_grey_adds_channel_axis() -> None:
    grey = np.full((2, 3, 3), 77, dtype=np.uint8)
    out = pre({"decode": {"mode": "L"}})(png(grey))
    assert out.shape == (2, 3, 1) and np.all(out == 77)


def test_decode_errors() -> None:
    with pytest.raises(SpecError) as err:
        pre({"scale": {"factor": 2}})(png(RGB))
    assert err.value.field == "spec.preprocessing" and "decode" in str(err.value)
    with pytest.raises(SpecError, match="remove the decode step") as err:
        pre({"decode": {}})(np.zeros((2, 2, 3), np.uint8))
    assert err.value.field == "spec.preprocessing[0].decode"
    with pytest.raises(PreprocessError, match="cannot decode"):
        pre({"decode": {}})(b"not an image")


# ------------------------------------------------------------------------------------ resize


def test_resize_nearest_uint8_duplicates_pixels() -> None:
    img = np.array([[1, 2], [3, 4]], dtype=np.uint8)[..., None]
    out = pre({"resize": {"height": 4, "width": 4, "interpolation": "nearest"}})(img)
    expected = np.array([[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]], np.uint8)
    assert out.shape == (4, 4, 1) and np.array_equal(out[..., 0], expected)


def test_resize_bilinear_float_half_pixel_centres() -> None:
    up = resize_hwc(np.array([[0.0, 1.0]], dtype=np.float32), 1, 4, "bilinear")
    assert up.dtype == np.float32
    np.testing.assert_allclose(up, [[0.0, 0.25, 0.75, 1.0]])
    down = resize_hwc(np.array([[0.0, 1.0, 2.0, 3.0]]), 1, 2, "bilinear")
    np.testing.assert_allclose(down, [[0.5, 2.5]])
    nearest = resize_hwc(np.array([[0.0, 1.0, 2.0, 3.0]]), 1, 2, "nearest")
    np.testing.assert_allclose(nearest, [[1.0, 3.0]])


def test_float_and_uint8_bilinear_agree_when_upscaling() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
    pillow = resize_hwc(img, 12, 10, "bilinear").astype(np.float64)
    numpy = resize_hwc(img.astype(np.float64), 12, 10, "bilinear")
    assert np.max(np.abs(pillow - numpy)) <= 1.0


def test_resize_in_chw_keeps_chw_and_bicubic_float() -> None:
    img = np.random.default_rng(1).random((3, 4, 6), dtype=np.float32)
    out = pre(
        {"layout": {"from": "HWC", "to": "CHW"}},
        {"resize": {"height": 8, "width": 2, "interpolation": "bicubic"}},
    )(np.transpose(img, (1, 2, 0)))
    assert out.shape == (3, 8, 2) and out.dtype == np.float32


# ------------------------------------------------------------------------------------- crop


def test_center_crop_hwc_and_chw() -> None:
    img = np.arange(30).reshape(5, 6, 1)
    out = pre({"centerCrop": {"height": 3, "width": 2}})(img)
    assert np.array_equal(out[..., 0], np.arange(30).reshape(5, 6)[1:4, 2:4])
    chw = pre({"layout": {"from": "HWC", "to": "CHW"}}, {"centerCrop": {"height": 3, "width": 2}})
    assert np.array_equal(chw(img), np.arange(30).reshape(1, 5, 6)[:, 1:4, 2:4])


def test_center_crop_larger_than_image() -> None:
    with pytest.raises(SpecError, match="larger than the image") as err:
        pre({"centerCrop": {"height": 9, "width": 2}})(np.zeros((5, 6, 1)))
    assert err.value.field == "spec.preprocessing[0].centerCrop"


# ---------------------------------------------------------------------- dtype and arithmetic


def test_to_float_scale_normalize_hwc() -> None:
    img = np.array([[[0, 51, 255]]], dtype=np.uint8)  # 1x1x3
    out = pre(
        {"toFloat": {}},
        {"scale": {"factor": 1 / 255}},
        {"normalize": {"mean": [0.5, 0.2, 0.0], "std": [0.5, 0.1, 2.0]}},
    )(img)
    assert out.dtype == np.float32 and out.shape == (1, 1, 3)
    np.testing.assert_allclose(out[0, 0], [-1.0, 0.0, 0.5], atol=1e-6)


def test_scale_uint8_becomes_float32_and_float64_stays() -> None:
    assert pre({"scale": {"factor": 0.5}})(np.array([2], np.uint8)).dtype == np.float32
    out = pre({"scale": {"factor": 0.5}})(np.array([3.0], np.float64))
    assert out.dtype == np.float64 and out[0] == 1.5
    assert pre({"toFloat": {"dtype": "float16"}})(np.array([1], np.uint8)).dtype == np.float16


def test_normalize_follows_the_layout() -> None:
    img = np.array([[[1.0, 2.0, 3.0]]], dtype=np.float32)
    steps = (
        {"layout": {"from": "HWC", "to": "CHW"}},
        {"normalize": {"mean": [1.0, 1.0, 1.0], "std": [1.0, 2.0, 4.0]}},
    )
    out = pre(*steps)(img)
    assert out.shape == (3, 1, 1)
    np.testing.assert_allclose(out[:, 0, 0], [0.0, 0.5, 0.5])
    # One value broadcasts to every channel.
    np.testing.assert_allclose(pre({"normalize": {"mean": [1], "std": [2]}})(img), [[[0, 0.5, 1]]])


def test_normalize_channel_count_mismatch_names_the_field() -> None:
    with pytest.raises(SpecError, match="3 values") as err:
        pre({"normalize": {"mean": [0, 0, 0], "std": [1, 1, 1]}})(np.zeros((2, 2, 1), np.float32))
    assert err.value.field == "spec.preprocessing[0].normalize.mean"


# --------------------------------------------------------------------- layout and channels


def test_layout_transposes_and_tracks() -> None:
    img = np.arange(24).reshape(2, 3, 4)
    to_chw = pre({"layout": {"from": "HWC", "to": "CHW"}})(img)
    assert to_chw.shape == (4, 2, 3) and np.array_equal(to_chw, img.transpose(2, 0, 1))
    back = pre({"layout": {"from": "HWC", "to": "CHW"}}, {"layout": {"from": "CHW", "to": "HWC"}})
    assert np.array_equal(back(img), img)
    assert pre({"layout": {"from": "HWC", "to": "CHW"}})(np.zeros((5, 6))).shape == (1, 5, 6)


def test_layout_from_must_match_current_layout() -> None:
    with pytest.raises(SpecError, match="is HWC at this step") as err:
        pre({"layout": {"from": "CHW", "to": "HWC"}})(np.zeros((2, 2, 3)))
    assert err.value.field == "spec.preprocessing[0].layout.from"


def test_channel_order_bgr_in_hwc_and_chw() -> None:
    img = np.array([[[1, 2, 3]]], dtype=np.uint8)
    assert pre({"channelOrder": {"order": "BGR"}})(img).tolist() == [[[3, 2, 1]]]
    assert pre({"channelOrder": {"order": "RGB"}})(img).tolist() == [[[1, 2, 3]]]
    chw = pre({"layout": {"from": "HWC", "to": "CHW"}}, {"channelOrder": {"order": "BGR"}})
    assert chw(img)[:, 0, 0].tolist() == [3, 2, 1]
    with pytest.raises(SpecError, match="needs 3 channels"):
        pre({"channelOrder": {"order": "BGR"}})(np.zeros((2, 2, 1)))


def test_imagenet_pipeline_end_to_end() -> None:
    rng = np.random.default_rng(0)
    image = png(rng.integers(0, 256, size=(300, 400, 3), dtype=np.uint8))
    p = pre(
        {"decode": {"mode": "RGB"}},
        {"resize": {"height": 256, "width": 256}},
        {"centerCrop": {"height": 224, "width": 224}},
        {"toFloat": {"dtype": "float32"}},
        {"scale": {"factor": 1 / 255}},
        {"normalize": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}},
        {"layout": {"from": "HWC", "to": "CHW"}},
    )
    out = p(image)
    assert out.shape == (3, 224, 224) and out.dtype == np.float32 and out.flags.c_contiguous
    info = p.check_model_input(tensor([-1, 3, 224, 224], layout="NCHW"), None)
    assert info.shape == (3, 224, 224) and info.dtype == "float32" and info.layout == "CHW"


# -------------------------------------------------------------------------- shape inference


DIGITS_STEPS = ({"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}})


def test_infer_shape_matches_running() -> None:
    p = pre(*DIGITS_STEPS)
    assert p.output_shape((8, 8, 1)) == (1, 8, 8) == p(np.zeros((8, 8, 1), np.float32)).shape
    assert infer_shape([], (5,)) == (5,)
    decoded = pre({"decode": {"mode": "L"}}, {"resize": {"height": 4, "width": 5}})
    assert decoded.output_shape(None) == (4, 5, 1)
    assert pre({"decode": {}}).output_shape(None) == (None, None, 3)
    assert p.check_model_input(tensor([-1, 1, 8, 8]), (8, 8, 1), "float32").shape == (1, 8, 8)


def test_missing_layout_step_is_reported_before_running() -> None:
    with pytest.raises(SpecError) as err:
        pre({"scale": {"factor": 0.0625}}).check_model_input(tensor([-1, 1, 8, 8]), (8, 8, 1))
    assert err.value.field == "spec.model.inputs[0].shape"
    message = str(err.value)
    assert "shape mismatch" in message
    assert "[-1, 1, 8, 8]" in message and "[-1, 8, 8, 1]" in message
    assert "layout: {from: HWC, to: CHW}" in message


def test_resize_and_mode_hints() -> None:
    with pytest.raises(SpecError, match=r"resize: \{height: 28, width: 28\}"):
        pre(*DIGITS_STEPS).check_model_input(tensor([-1, 1, 28, 28]), (8, 8, 1))
    rgb = pre(
        {"decode": {"mode": "RGB"}},
        {"resize": {"height": 8, "width": 8}},
        {"toFloat": {}},
        {"layout": {"from": "HWC", "to": "CHW"}},
    )
    with pytest.raises(SpecError, match="mode: L"):
        rgb.check_model_input(tensor([-1, 1, 8, 8], layout="NCHW"), None)
    with pytest.raises(SpecError, match="4-D samples"):
        pre().check_model_input(tensor([-1, 1, 8, 8, 1]), (8, 8, 1))


def test_dtype_mismatch_suggests_to_float() -> None:
    p = pre({"decode": {}}, {"resize": {"height": 8, "width": 8}})
    with pytest.raises(SpecError, match=r"toFloat: \{dtype: float32\}") as err:
        p.check_model_input(tensor([-1, 8, 8, 3]), None)
    assert err.value.field == "spec.model.inputs[0].dtype"
    p.check_model_input(tensor([-1, 8, 8, 3], dtype="uint8"), None)


def test_inference_catches_step_errors_early() -> None:
    with pytest.raises(SpecError, match="larger than the image"):
        pre({"centerCrop": {"height": 10, "width": 10}}).output_shape((8, 8, 1))
    with pytest.raises(SpecError) as err:
        pre({"scale": {"factor": 2}}).output_shape(None)
    assert err.value.field == "spec.preprocessing"
    with pytest.raises(SpecError, match="is CHW at this step"):
        pre(
            {"layout": {"from": "HWC", "to": "CHW"}}, {"layout": {"from": "HWC", "to": "CHW"}}
        ).output_shape((2, 2, 3))


# ---------------------------------------------------------------------------- preprocess_all


def test_preprocess_all_batches_and_times_each_sample() -> None:
    images = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32) * 16
    samples = Samples(name="t", x=images, y=np.arange(4))
    batch, latencies = preprocess_all(pre(*DIGITS_STEPS), samples)
    assert batch.shape == (4, 1, 8, 8) and batch.dtype == np.float32
    np.testing.assert_allclose(batch, images.transpose(0, 3, 1, 2) / 16)
    assert latencies.shape == (4,) and latencies.dtype == np.int64 and np.all(latencies >= 0)


def test_preprocess_all_rejects_ragged_samples() -> None:
    samples = [np.zeros((2, 2, 1)), np.zeros((3, 2, 1))]
    with pytest.raises(PreprocessError, match="sample 1"):
        preprocess_all(pre(), samples)


# --------------------------------------------------------------------------- postprocessing


def test_default_postprocessing_is_argmax_and_top5_on_raw_outputs() -> None:
    outputs = np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 0.0]], dtype=np.float32)
    p = post()(outputs)
    assert p.scores is not None and np.array_equal(p.scores, outputs)
    assert p.argmax.tolist() == [1, 0]  # tie goes to the lower index
    assert p.topk_indices.tolist() == [[1, 2, 0], [0, 1, 2]]
    assert p.topk_scores is not None and p.topk_scores.tolist() == [[3, 2, 1], [5, 5, 0]]
    assert len(p) == 2


def test_softmax_topk_and_labels(tmp_path: Path) -> None:
    logits = np.array([[0.0, np.log(3.0)], [np.log(4.0), 0.0]], dtype=np.float32)
    (tmp_path / "labels.txt").write_text("cat\ndog\n\n")
    p = post(
        {"softmax": {}}, {"topk": {"k": 1}}, {"labels": {"uri": "labels.txt"}}, base_dir=tmp_path
    )([logits, np.zeros(2)])
    assert p.scores is not None
    np.testing.assert_allclose(p.scores, [[0.25, 0.75], [0.8, 0.2]], rtol=1e-6)
    assert p.scores.dtype == np.float32
    assert p.topk_indices.tolist() == [[1], [0]]
    assert p.class_names == ["cat", "dog"]
    assert p.names(p.argmax) == ["dog", "cat"]
    named = post({"labels": {"names": ["a", "b"]}})(logits)
    assert named.class_names == ["a", "b"]


def test_softmax_is_stable_and_sums_to_one() -> None:
    out = softmax(np.array([[1000.0, 1000.0, -1000.0]]))
    np.testing.assert_allclose(out, [[0.5, 0.5, 0.0]])


def test_index_outputs_and_extra_axes() -> None:
    p = post()(np.array([3, 1], dtype=np.int64))
    assert p.scores is None and p.argmax.tolist() == [3, 1] and p.topk_indices.shape == (2, 1)
    q = post({"argmax": {}})(np.array([[[0.1, 0.9]], [[0.7, 0.3]]]))
    assert q.argmax.tolist() == [1, 0] and q.topk_indices.shape == (2, 2)


def test_non_class_axis_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        post({"softmax": {"axis": 0}})(np.zeros((2, 3)))
    assert err.value.field == "spec.postprocessing[0].softmax.axis"


def test_missing_labels_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found") as err:
        post({"labels": {"uri": "nope.txt"}}, base_dir=tmp_path)
    assert err.value.field == "spec.postprocessing[0].labels.uri"


# --------------------------------------------------------------------------------- accuracy


def test_accuracy_top1_top5() -> None:
    scores = np.array(
        [
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6],  # label 6: top-1
            [0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # label 4: 5th best -> top-5
            [0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # label 5: 6th best -> miss
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # label 0: tie, lowest index wins
        ]
    )
    p = post({"topk": {"k": 1}})(scores)
    top1, top5 = accuracy(p, np.array([6, 4, 5, 0]))
    assert (top1, top5) == (0.5, 0.75)


def test_accuracy_with_fewer_than_five_classes_and_errors() -> None:
    p = post()(np.array([[0.2, 0.8], [0.9, 0.1]]))
    assert accuracy(p, np.array([0, 0])) == (0.5, 1.0)
    with pytest.raises(ValueError, match="2 predictions but 3 labels"):
        accuracy(p, np.array([0, 0, 1]))
    only_indices = Predictions(scores=None, topk_indices=np.array([[1]]), argmax=np.array([1]))
    assert accuracy(only_indices, np.array([1])) == (1.0, 1.0)


def test_channels_first_raw_samples_normalize_on_axis_zero() -> None:
    """A CHW dataset (spec.dataset.layout) normalizes per channel on axis 0, no transpose."""
    step = PreprocessStep.model_validate({"normalize": {"mean": [1.0, 2.0], "std": [1.0, 2.0]}})
    pre = Preprocessor([step], layout="CHW")
    sample = np.stack([np.full((3, 3), 2.0), np.full((3, 3), 4.0)]).astype(np.float32)
    out = pre(sample)
    assert out.shape == (2, 3, 3)
    np.testing.assert_allclose(out[0], 1.0)
    np.testing.assert_allclose(out[1], 1.0)
    assert pre.infer((2, 3, 3)).layout == "CHW"
