"""Datasets: deterministic order, seeded synthetic data, image folders, npz files, limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlmodelscope.agent.datasets import load_dataset
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import Dataset


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MLMS_PATH_MAP", raising=False)
    return tmp_path / "cache"


def dataset(**fields: Any) -> Dataset:
    return Dataset.model_validate(fields)


# ------------------------------------------------------------------------------------ digits


def test_digits_splits_are_fixed_and_labelled() -> None:
    test = load_dataset(dataset(type="digits", split="test"), seed=0)
    train = load_dataset(dataset(type="digits", split="train"), seed=0)
    everything = load_dataset(dataset(type="digits", split="all"), seed=0)
    assert len(everything) == 1797
    assert len(test) + len(train) == 1797
    assert 340 <= len(test) <= 380  # 20 %
    assert isinstance(test.x, np.ndarray)
    assert test.x.shape[1:] == (8, 8, 1) and test.x.dtype == np.float32
    assert float(test.x.max()) == 16.0 and float(test.x.min()) == 0.0
    assert (
        test.y is not None and test.y.dtype == np.int64 and set(test.y.tolist()) == set(range(10))
    )
    assert test.has_labels and test.class_names == [str(i) for i in range(10)]
    assert test.name == "digits/test"


def test_digits_is_deterministic_and_ignores_seed() -> None:
    a = load_dataset(dataset(type="digits"), seed=1)
    b = load_dataset(dataset(type="digits"), seed=2)
    assert isinstance(a.x, np.ndarray) and isinstance(b.x, np.ndarray)
    assert np.array_equal(a.x, b.x)
    assert a.y is not None and b.y is not None and np.array_equal(a.y, b.y)


def test_digits_limit_takes_the_first_samples() -> None:
    full = load_dataset(dataset(type="digits"), seed=0)
    limited = load_dataset(dataset(type="digits", limit=10), seed=0)
    assert len(limited) == 10
    assert isinstance(limited.x, np.ndarray) and isinstance(full.x, np.ndarray)
    assert np.array_equal(limited.x, full.x[:10])
    assert limited.y is not None and full.y is not None
    assert np.array_equal(limited.y, full.y[:10])


# --------------------------------------------------------------------------------- synthetic


def test_synthetic_float_is_seeded() -> None:
    ds = dataset(type="synthetic", shape=[3, 4, 4], size=6)
    a = load_dataset(ds, seed=7)
    b = load_dataset(ds, seed=7)
    c = load_dataset(ds, seed=8)
    assert isinstance(a.x, np.ndarray) and isinstance(b.x, np.ndarray)
    assert isinstance(c.x, np.ndarray)
    assert a.x.shape == (6, 3, 4, 4) and a.x.dtype == np.float32
    assert np.array_equal(a.x, b.x) and not np.array_equal(a.x, c.x)
    assert np.array_equal(a.x, np.random.default_rng(7).standard_normal((6, 3, 4, 4), np.float32))
    assert a.y is None and not a.has_labels and a.class_names is None


def test_synthetic_uint8_and_limit_prefix() -> None:
    full = load_dataset(dataset(type="synthetic", shape=[5], dtype="uint8", size=20), seed=3)
    part = load_dataset(
        dataset(type="synthetic", shape=[5], dtype="uint8", size=20, limit=4), seed=3
    )
    assert isinstance(full.x, np.ndarray) and isinstance(part.x, np.ndarray)
    assert full.x.dtype == np.uint8 and full.x.shape == (20, 5)
    assert len(part) == 4 and np.array_equal(part.x, full.x[:4])


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("float16", np.float16), ("float64", np.float64), ("int64", np.int64), ("bool", np.bool_)],
)
def test_synthetic_dtypes(dtype: str, expected: type) -> None:
    samples = load_dataset(dataset(type="synthetic", shape=[2, 2], dtype=dtype, size=3), seed=0)
    assert isinstance(samples.x, np.ndarray) and samples.x.dtype == expected


# ------------------------------------------------------------------------------- imagefolder


def write_folder(root: Path) -> None:
    colours = {"cat": (255, 0, 0), "dog": (0, 255, 0)}
    for name, colour in colours.items():
        (root / name).mkdir(parents=True)
        for i in (2, 0, 1):
            Image.new("RGB", (4 + i, 3), colour).save(root / name / f"img{i}.png")
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    (root / "README").write_text("a file, not a class")


def test_imagefolder_order_and_labels(tmp_path: Path) -> None:
    write_folder(tmp_path / "data")
    samples = load_dataset(dataset(type="imagefolder", path="data"), seed=0, base_dir=tmp_path)
    assert samples.class_names == ["cat", "dog"]
    assert [Path(str(p)).relative_to(tmp_path / "data").as_posix() for p in samples.x] == [
        "cat/img0.png",
        "cat/img1.png",
        "cat/img2.png",
        "dog/img0.png",
        "dog/img1.png",
        "dog/img2.png",
    ]
    assert samples.y is not None and samples.y.tolist() == [0, 0, 0, 1, 1, 1]
    limited = load_dataset(
        dataset(type="imagefolder", path=str(tmp_path / "data"), limit=4), seed=0
    )
    assert len(limited) == 4 and limited.y is not None and limited.y.tolist() == [0, 0, 0, 1]


def test_imagefolder_missing_or_empty(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found") as err:
        load_dataset(dataset(type="imagefolder", path="nope"), seed=0, base_dir=tmp_path)
    assert err.value.field == "spec.dataset.path"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="no class sub-folders"):
        load_dataset(dataset(type="imagefolder", path="empty"), seed=0, base_dir=tmp_path)
    (tmp_path / "empty" / "cls").mkdir()
    with pytest.raises(SpecError, match="no images"):
        load_dataset(dataset(type="imagefolder", path="empty"), seed=0, base_dir=tmp_path)


# ---------------------------------------------------------------------------------------- npz


def test_npz_with_labels(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int32)
    np.savez(tmp_path / "data.npz", x=x, y=y, class_names=np.array(["a", "b", "c"]))
    samples = load_dataset(dataset(type="npz", uri="data.npz", limit=5), seed=0, base_dir=tmp_path)
    assert isinstance(samples.x, np.ndarray)
    assert np.array_equal(samples.x, x[:5])
    assert samples.y is not None and samples.y.dtype == np.int64
    assert samples.y.tolist() == [0, 1, 2, 0, 1]
    assert samples.class_names == ["a", "b", "c"]


def test_npz_without_labels(tmp_path: Path) -> None:
    np.savez(tmp_path / "data.npz", x=np.zeros((3, 4), np.float32))
    samples = load_dataset(dataset(type="npz", uri=f"file://{tmp_path}/data.npz"), seed=0)
    assert len(samples) == 3 and not samples.has_labels


def test_npz_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found") as err:
        load_dataset(dataset(type="npz", uri="missing.npz"), seed=0, base_dir=tmp_path)
    assert err.value.field == "spec.dataset.uri"
    np.savez(tmp_path / "nox.npz", data=np.zeros(3))
    with pytest.raises(SpecError, match=r"no array 'x'.*data") as err:
        load_dataset(dataset(type="npz", uri="nox.npz"), seed=0, base_dir=tmp_path)
    assert err.value.field == "spec.dataset.uri"
    np.savez(tmp_path / "bady.npz", x=np.zeros((3, 2)), y=np.zeros(2))
    with pytest.raises(SpecError, match="one integer label per sample"):
        load_dataset(dataset(type="npz", uri="bady.npz"), seed=0, base_dir=tmp_path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(SpecError, match="not a readable"):
        load_dataset(dataset(type="npz", uri="junk.npz"), seed=0, base_dir=tmp_path)


# -------------------------------------------------------------------------------------- text


def test_a_limited_text_dataset_keeps_the_label_numbers_and_stops_reading(tmp_path: Path) -> None:
    """The agent passes ``limit`` to the reader: the first rows keep the numbers the whole
    file gives their class names, and with integer labels a broken line past the limit is
    never read."""
    rows = [("rain", "weather"), ("goal", "sport"), ("paint", "art"), ("sun", "weather")]
    path = tmp_path / "topics.jsonl"
    path.write_text("".join(f'{{"text": "{t}", "label": "{y}"}}\n' for t, y in rows))
    fields = {"type": "text", "path": str(path), "tokenizer": "tokenizer.json"}
    whole = load_dataset(dataset(**fields), seed=0)
    part = load_dataset(dataset(**fields, limit=2), seed=0)
    assert whole.class_names == part.class_names == ["art", "sport", "weather"]
    assert whole.y is not None and part.y is not None
    assert part.y.tolist() == whole.y.tolist()[:2] == [2, 1] and part.x == ["rain", "goal"]
    path.write_text('{"text": "a", "label": 3}\n{"text": "b", "label": 1}\n{oops\n')
    assert load_dataset(dataset(**fields, limit=2), seed=0).x == ["a", "b"]
    with pytest.raises(SpecError, match="line 3 is not JSON") as err:
        load_dataset(dataset(**fields), seed=0)
    assert err.value.field == "spec.dataset.path"
