"""The digits split (one definition for training and evaluation) and the model cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mlmodelscope.agent import digits
from mlmodelscope.agent.digits import digits_split, ensure_digits_models

TEST_INDICES_SHA256 = "2fbaae31b8c6aad12464a07771b64269876d904bfed86f77a63c8265fa201621"
"""Pins which samples are held out: a change moves every recorded accuracy."""


def _row_keys(images: np.ndarray, labels: np.ndarray) -> list[bytes]:
    return sorted(
        img.tobytes() + bytes([int(lab)]) for img, lab in zip(images, labels, strict=True)
    )


def test_shapes_dtypes_and_values() -> None:
    sizes = {}
    for split in ("train", "test", "all"):
        images, labels = digits_split(split)
        assert images.dtype == np.float32
        assert labels.dtype == np.int64
        assert images.shape == (len(labels), 8, 8, 1)
        assert images.min() == 0.0
        assert images.max() == 16.0
        assert images.flags.c_contiguous
        sizes[split] = len(labels)
    assert sizes == {"train": 1437, "test": 360, "all": 1797}


def test_split_is_deterministic() -> None:
    first, second = digits_split("test"), digits_split("test")
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


def test_train_and_test_partition_all() -> None:
    train, test, everything = digits_split("train"), digits_split("test"), digits_split("all")
    joined = _row_keys(np.concatenate([train[0], test[0]]), np.concatenate([train[1], test[1]]))
    assert joined == _row_keys(*everything)


def test_split_is_stratified() -> None:
    _, labels = digits_split("all")
    _, test = digits_split("test")
    expected = np.bincount(labels, minlength=10) * digits.TEST_FRACTION
    assert np.all(np.abs(np.bincount(test, minlength=10) - expected) <= 1)


def test_split_is_the_seeded_sklearn_split_in_dataset_order() -> None:
    from sklearn.model_selection import train_test_split

    images, labels = digits_split("all")
    _, test_idx = train_test_split(
        np.arange(len(labels)), test_size=0.2, random_state=0, stratify=labels
    )
    test_idx = np.sort(test_idx)
    test_images, test_labels = digits_split("test")
    np.testing.assert_array_equal(test_images, images[test_idx])
    np.testing.assert_array_equal(test_labels, labels[test_idx])
    digest = hashlib.sha256(test_idx.astype(np.int64).tobytes()).hexdigest()
    assert digest == TEST_INDICES_SHA256


def test_unknown_split() -> None:
    with pytest.raises(ValueError, match="validation"):
        digits_split("validation")


def test_training_script_is_found() -> None:
    script = digits.find_training_script()
    assert script.name == "train_digits.py"
    assert script.is_file()


def test_cache_key_follows_the_script(tmp_path: Path) -> None:
    script = digits.find_training_script()
    copy = tmp_path / "train_digits.py"
    copy.write_bytes(script.read_bytes())
    assert digits.digits_models_key(copy) == digits.digits_models_key(script)
    copy.write_bytes(script.read_bytes() + b"\n# changed\n")
    assert digits.digits_models_key(copy) != digits.digits_models_key(script)


def test_ensure_reuses_a_complete_build(tmp_path: Path) -> None:
    key = digits.digits_models_key(digits.find_training_script())
    folder = tmp_path / "models" / "digits" / key
    folder.mkdir(parents=True)
    (folder / digits.MANIFEST).write_text(json.dumps({"model": "digits-cnn"}))
    assert ensure_digits_models(tmp_path) == folder


def test_ensure_honours_mlms_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = digits.digits_models_key(digits.find_training_script())
    folder = tmp_path / "models" / "digits" / key
    folder.mkdir(parents=True)
    (folder / digits.MANIFEST).write_text("{}")
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path))
    assert ensure_digits_models() == folder


@pytest.mark.frameworks
def test_built_models_manifest(digits_models: Path) -> None:
    manifest = json.loads((digits_models / digits.MANIFEST).read_text())
    assert set(manifest["files"]) == set(digits.MODEL_FILES.values())
    for name in digits.MODEL_FILES.values():
        assert (digits_models / name).exists()
    assert min(manifest["accuracy"].values()) >= 0.95
    assert max(manifest["max_abs_diff"].values()) < 1e-4


def test_split_cache_returns_the_computed_split_and_survives_a_bad_file(tmp_path: Path) -> None:
    computed = digits._compute_split("test")
    first = digits_split("test", cache_dir=tmp_path)
    (cached,) = (tmp_path / "datasets" / "digits").glob("test-*.npz")
    second = digits_split("test", cache_dir=tmp_path)  # read back from the file
    for images, labels in (first, second):
        np.testing.assert_array_equal(images, computed[0])
        np.testing.assert_array_equal(labels, computed[1])
        assert images.dtype == np.float32 and labels.dtype == np.int64
        assert images.flags.c_contiguous
    cached.write_bytes(b"not an npz")
    np.testing.assert_array_equal(digits_split("test", cache_dir=tmp_path)[1], computed[1])
    np.testing.assert_array_equal(np.load(cached)["labels"], computed[1])  # rewritten
    cached.write_bytes(b"PK\x03\x04 truncated zip")
    np.testing.assert_array_equal(digits_split("test", cache_dir=tmp_path)[1], computed[1])
