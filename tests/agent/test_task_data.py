"""Task datasets in users' formats: deterministic order and limits, and every broken input a
clear error naming the file (or a counted skip where the caller allows one)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlmodelscope.agent.tasks.data import (
    DatasetError,
    load_coco,
    load_masks,
    load_pairs,
    load_text,
)

ROOT = Path(__file__).parents[2]


def coco_folder(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    images = tmp_path / "images"
    images.mkdir()
    document: dict[str, Any] = {
        "images": [
            {"id": i, "file_name": f"{i:03d}.jpg", "width": 32, "height": 24} for i in (3, 1, 2)
        ],
        "categories": [{"id": 7, "name": "square"}, {"id": 9, "name": "disc"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 10, 8]},
            {"id": 2, "image_id": 2, "category_id": 9, "bbox": [4, 4, 6, 6], "area": 30},
            {"id": 3, "image_id": 2, "category_id": 7, "bbox": [0, 0, 32, 24], "iscrowd": 1},
            {"id": 4, "image_id": 3, "category_id": 9, "bbox": [5, 5, 5, 5]},
        ],
    }
    for entry in document["images"]:
        Image.new("RGB", (32, 24)).save(images / entry["file_name"])
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps(document))
    return annotations, images, document


def test_coco_images_come_in_id_order_with_their_boxes_and_a_matching_ground_truth(
    tmp_path: Path,
) -> None:
    annotations, images, _ = coco_folder(tmp_path)
    data = load_coco(annotations, images)
    assert [i.id for i in data.images] == [1, 2, 3]
    assert data.images[0].boxes == ((1.0, 2.0, 10.0, 8.0),) and data.images[0].categories == (7,)
    assert data.images[1].boxes == ((4.0, 4.0, 6.0, 6.0),)  # the crowd region is no target
    assert data.categories == {7: "square", 9: "disc"}
    first_two = load_coco(annotations, images, limit=2)
    assert [i.id for i in first_two.images] == [1, 2]
    truth = first_two.ground_truth
    assert sorted(a["id"] for a in truth["annotations"]) == [1, 2, 3]
    assert {a["id"]: a["area"] for a in truth["annotations"]} == {1: 80, 2: 30, 3: 768}


def test_a_missing_image_is_an_error_naming_it_or_a_counted_skip(tmp_path: Path) -> None:
    annotations, images, _ = coco_folder(tmp_path)
    (images / "002.jpg").unlink()
    with pytest.raises(DatasetError, match=r"002\.jpg: image 2 of .*instances\.json is missing"):
        load_coco(annotations, images)
    data = load_coco(annotations, images, skip_missing=True)
    assert [i.id for i in data.images] == [1, 3] and data.skipped == 1


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda d: "{not json", r"instances\.json: not JSON \(.* at line 1\)"),
        (lambda d: json.dumps({"annotations": []}), r"instances\.json: no 'images' list"),
        (
            lambda d: json.dumps({**d, "annotations": [{"id": 5, "image_id": 1}]}),
            r"annotations\[0\] lacks category_id, bbox",
        ),
        (
            lambda d: json.dumps(
                {**d, "annotations": [{"id": 5, "image_id": 1, "category_id": 7, "bbox": [1, 2]}]}
            ),
            r"annotations\[0\] \(id 5\) has bbox \[1, 2\]",
        ),
        (
            lambda d: json.dumps(
                {**d, "annotations": [{"id": 5, "image_id": 1, "category_id": 8, "bbox": [0] * 4}]}
            ),
            r"names category 8, which 'categories' does not list",
        ),
    ],
)
def test_malformed_coco_json_names_the_file_and_the_entry(
    tmp_path: Path, break_it: Any, message: str
) -> None:
    annotations, images, document = coco_folder(tmp_path)
    annotations.write_text(break_it(document))
    with pytest.raises(DatasetError, match=message):
        load_coco(annotations, images)
    with pytest.raises(DatasetError, match=r"nothing\.json: no such file"):
        load_coco(tmp_path / "nothing.json", images)


def mask_folders(tmp_path: Path, count: int = 3) -> tuple[Path, Path]:
    images, masks = tmp_path / "JPEGImages", tmp_path / "SegmentationClass"
    images.mkdir()
    masks.mkdir()
    for i in range(count):
        Image.new("RGB", (20, 10)).save(images / f"img{i}.jpg")
        Image.fromarray(np.full((10, 20), i, dtype=np.uint8)).convert("P").save(
            masks / f"img{i}.png"
        )
    return images, masks


def test_masks_pair_with_images_by_name_in_sorted_order(tmp_path: Path) -> None:
    images, masks = mask_folders(tmp_path)
    data = load_masks(images, masks, limit=2)
    assert [(s.image.name, s.mask.name) for s in data.samples] == [
        ("img0.jpg", "img0.png"),
        ("img1.jpg", "img1.png"),
    ]


def test_a_mask_of_the_wrong_size_or_kind_or_missing_names_the_file(tmp_path: Path) -> None:
    images, masks = mask_folders(tmp_path)
    Image.new("L", (20, 11)).save(masks / "img1.png")
    with pytest.raises(DatasetError, match=r"img1\.png: 20x11 pixels, but .*img1\.jpg is 20x10"):
        load_masks(images, masks)
    Image.new("RGB", (20, 10)).save(masks / "img1.png")
    with pytest.raises(DatasetError, match=r"img1\.png: mode RGB; a mask holds one class index"):
        load_masks(images, masks)
    (masks / "img1.png").unlink()
    with pytest.raises(DatasetError, match=r"img1\.png: the mask of .*img1\.jpg is missing"):
        load_masks(images, masks)
    assert load_masks(images, masks, skip_missing=True).skipped == 1


def pair_folders(tmp_path: Path, scale: int = 1, count: int = 3) -> tuple[Path, Path]:
    inputs, targets = tmp_path / "LR", tmp_path / "HR"
    inputs.mkdir()
    targets.mkdir()
    for i in (2, 0, 1)[:count]:
        Image.new("RGB", (20, 10)).save(inputs / f"img{i}.png")
        Image.new("RGB", (20 * scale, 10 * scale)).save(targets / f"img{i}.png")
    return inputs, targets


@pytest.mark.parametrize("scale", [1, 4])
def test_pairs_match_by_file_name_in_sorted_order_at_one_scale(tmp_path: Path, scale: int) -> None:
    inputs, targets = pair_folders(tmp_path, scale)
    data = load_pairs(inputs, targets)
    assert [(s.image.name, s.target.name) for s in data.samples] == [
        ("img0.png", "img0.png"),
        ("img1.png", "img1.png"),
        ("img2.png", "img2.png"),
    ]
    assert data.scale == scale and data.skipped == 0
    assert [s.image.name for s in load_pairs(inputs, targets, limit=2).samples] == [
        "img0.png",
        "img1.png",
    ]


def test_a_target_of_another_size_or_missing_names_the_file(tmp_path: Path) -> None:
    inputs, targets = pair_folders(tmp_path)
    Image.new("RGB", (40, 20)).save(targets / "img1.png")
    with pytest.raises(
        DatasetError,
        match=r"HR/img1\.png: 40x20 pixels, but .*LR/img1\.png is 20x10 \(the set's targets "
        r"are 1x their inputs\)",
    ):
        load_pairs(inputs, targets)
    Image.new("RGB", (40, 10)).save(targets / "img0.png")
    with pytest.raises(DatasetError, match=r"img0\.png: 40x10 pixels, but .*img0\.png is 20x10$"):
        load_pairs(inputs, targets)
    (targets / "img0.png").unlink()
    (targets / "img1.png").unlink()
    with pytest.raises(
        DatasetError, match=r"HR/img0\.png: the target of .*LR/img0\.png is missing"
    ):
        load_pairs(inputs, targets)
    data = load_pairs(inputs, targets, skip_missing=True)
    assert [s.image.name for s in data.samples] == ["img2.png"] and data.skipped == 2
    with pytest.raises(DatasetError, match=r"nowhere: no such folder of images"):
        load_pairs(tmp_path / "nowhere", targets)


def test_rendered_pairs_are_deterministic_noisy_copies_of_their_targets(tmp_path: Path) -> None:
    from mlmodelscope.agent.tasks.shapes import write_pairs

    folder = write_pairs(tmp_path / "a", 4, seed=3, sigma=0.1)
    again = write_pairs(tmp_path / "b", 4, seed=3, sigma=0.1)
    data = load_pairs(folder.inputs, folder.targets)
    assert len(data.samples) == 4 and data.scale == 1
    for pair in data.samples:
        noisy = np.asarray(Image.open(pair.image), dtype=np.float64)
        clean = np.asarray(Image.open(pair.target), dtype=np.float64)
        assert np.array_equal(clean, np.asarray(Image.open(again.targets / pair.target.name)))
        assert np.array_equal(noisy, np.asarray(Image.open(again.inputs / pair.image.name)))
        assert 20 < np.std(noisy - clean) < 30  # sigma 0.1 of 255, a little less where clipped


def test_text_rows_keep_file_order_and_string_labels_become_sorted_indices(
    tmp_path: Path,
) -> None:
    jsonl = tmp_path / "reviews.jsonl"
    rows = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}, {"text": "ok"}]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    data = load_text(jsonl)
    assert data.texts == ("good", "bad") and data.labels == (1, 0)
    assert data.class_names == ("neg", "pos")
    csv_file = tmp_path / "reviews.csv"
    csv_file.write_text('text,label\n"a, b",2\nc,0\n')
    assert load_text(csv_file).labels == (2, 0) and load_text(csv_file, limit=1).texts == ("a, b",)
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DatasetError, match=r"reviews\.jsonl: row 3 has no label field"):
        load_text(jsonl)
    jsonl.write_text('{"text": "a", "label": 1}\n{broken\n')
    with pytest.raises(DatasetError, match=r"reviews\.jsonl: line 2 is not JSON"):
        load_text(jsonl)
    with pytest.raises(
        DatasetError, match=r"reviews\.txt: expected a \.jsonl, \.csv or \.parquet file"
    ):
        (tmp_path / "reviews.txt").write_text("x")
        load_text(tmp_path / "reviews.txt")


TOPICS = ["sport", "weather", "sport", "art", "weather", "music"]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_limit_keeps_every_class_names_number(tmp_path: Path, suffix: str) -> None:
    """Class names are numbered over the whole file (art, music, sport, weather), so the
    first rows of a limited read carry the numbers they have in the unlimited one, though
    they hold only two of the names."""
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate(TOPICS)]
    path = tmp_path / f"topics{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".csv":
        path.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    else:
        write_parquet(path, {key: [r[key] for r in rows] for key in ("text", "label")}, 2)
    whole = load_text(path)
    assert whole.class_names == ("art", "music", "sport", "weather")
    assert whole.labels == (2, 3, 2, 0, 3, 1)
    for limit in (1, 2, 3, 6, 10):
        part = load_text(path, limit=limit)
        assert part.class_names == whole.class_names, limit
        assert part.labels == whole.labels[:limit] and part.texts == whole.texts[:limit]


def test_reading_stops_at_the_limit_for_integer_labels_only(tmp_path: Path) -> None:
    """Integer labels need no numbering: a limited read stops, and a malformed line past the
    limit is never reached. Class names need every row's label, so the same line past the
    limit is reached and named; a row past the limit without a text is no error then."""
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n{broken\n')
    assert load_text(jsonl, limit=2).labels == (1, 0)
    with pytest.raises(DatasetError, match=r"reviews\.jsonl: line 3 is not JSON"):
        load_text(jsonl)
    jsonl.write_text('{"text": "a", "label": "pos"}\n{"label": "neg"}\n{broken\n')
    with pytest.raises(DatasetError, match=r"reviews\.jsonl: line 3 is not JSON"):
        load_text(jsonl, limit=1)
    jsonl.write_text('{"text": "a", "label": "pos"}\n{"label": "neg"}\n{"text": "c"}\n')
    with pytest.raises(DatasetError, match=r"reviews\.jsonl: row 3 has no label field"):
        load_text(jsonl, limit=1)
    jsonl.write_text('{"text": "a", "label": "pos"}\n{"label": "neg"}\n')
    data = load_text(jsonl, limit=1)
    assert data.labels == (1,) and data.class_names == ("neg", "pos")
    parquet = write_parquet(
        tmp_path / "reviews.parquet", {"text": ["a", None, "c"], "label": ["pos", "neg", None]}
    )
    with pytest.raises(DatasetError, match=r"reviews\.parquet: row 3: 'label' is null"):
        load_text(parquet, limit=1)


def test_integer_labels_and_class_names_in_one_file_are_refused_naming_both_rows(
    tmp_path: Path,
) -> None:
    """A mix would number differently with and without a limit, so it is an error; a limit
    that stops before the first class name reads the integers alone."""
    jsonl = tmp_path / "mixed.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n'
                     '{"text": "c", "label": "neg"}\n')  # fmt: skip
    with pytest.raises(DatasetError) as caught:
        load_text(jsonl)
    assert str(caught.value) == (
        f"{jsonl}: row 3's label 'neg' is a class name, but row 1's 1 is an integer; "
        "labels are all integers or all class names"
    )
    assert load_text(jsonl, limit=2).labels == (1, 0)
    csv_file = tmp_path / "mixed.csv"
    csv_file.write_text("text,label\na,neg\nb,pos\nc,3\n")
    with pytest.raises(DatasetError, match=r"row 3's label '3' is an integer, but row 1's"):
        load_text(csv_file, limit=1)


REVIEWS = [
    {"text": "good", "label": "pos", "stars": 5},
    {"text": "bad", "label": "neg", "stars": 1},
    {"text": "fine, really", "label": "pos", "stars": 4},
    {"text": "meh", "label": "mid", "stars": 3},
]


def write_parquet(path: Path, columns: dict[str, Any], row_group_size: int | None = None) -> Path:
    pa = pytest.importorskip("pyarrow", reason="pip install 'mlmodelscope[parquet]'")
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_rows_are_the_same_samples_as_the_same_rows_in_jsonl(tmp_path: Path) -> None:
    """String and integer labels, the default and named fields, and the limit: a Parquet file
    gives exactly what the same rows in a JSONL file give, in file order, whatever its row
    groups."""
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in REVIEWS))
    columns = {key: [r[key] for r in REVIEWS] for key in ("stars", "text", "label")}
    for groups in (None, 1, 3):
        parquet = write_parquet(tmp_path / f"reviews-{groups}.parquet", columns, groups)
        for fields in ({}, {"label_field": "stars"}):
            for limit in (None, 1, 3, 4, 10):
                want = load_text(jsonl, limit=limit, **fields)
                assert load_text(parquet, limit=limit, **fields) == want, (groups, fields, limit)
    data = load_text(tmp_path / "reviews-1.parquet")
    assert data.texts == ("good", "bad", "fine, really", "meh") and data.labels == (2, 1, 2, 0)
    assert data.class_names == ("mid", "neg", "pos")
    assert load_text(tmp_path / "reviews-1.parquet", label_field="stars").labels == (5, 1, 4, 3)


def test_parquet_limit_cuts_before_the_rows_are_checked_and_reads_no_further(
    tmp_path: Path,
) -> None:
    """As for JSONL: a bad row past the limit is no error. Past the limit nothing is read: a
    file whose third row group is garbage reads with a limit of 2 and fails without one."""
    parquet = write_parquet(
        tmp_path / "reviews.parquet", {"text": ["a", "b", None], "label": [1, 0, None]}, 1
    )
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n{"text": "c"}\n')
    assert load_text(parquet, limit=2) == load_text(jsonl, limit=2)
    assert load_text(parquet, limit=2).texts == ("a", "b")
    with pytest.raises(DatasetError, match=r"reviews\.parquet: row 3: 'text' is null"):
        load_text(parquet)

    import pyarrow.parquet as pq

    good = write_parquet(
        tmp_path / "broken.parquet", {"text": ["a", "b", "c"], "label": [1, 0, 1]}, 1
    )
    body = bytearray(good.read_bytes())
    third = pq.ParquetFile(good).metadata.row_group(2)
    for column in range(third.num_columns):
        chunk = third.column(column)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        body[start : start + chunk.total_compressed_size] = b"\xab" * chunk.total_compressed_size
    good.write_bytes(bytes(body))
    assert load_text(good, limit=2).texts == ("a", "b")
    with pytest.raises(DatasetError, match=r"broken\.parquet: not a readable Parquet file \(.+\)"):
        load_text(good)


@pytest.mark.parametrize(
    "columns,words",
    [
        ({"body": ["a"], "label": [1]}, "no column 'text'; its columns are body, label"),
        ({"text": ["a"], "stars": [1]}, "no column 'label'; its columns are text, stars"),
        ({"body": ["a"], "y": [1]}, "no column 'text' or 'label'; its columns are body, y"),
        ({"text": ["a", "b"], "label": [1, None]}, "row 2: 'label' is null"),
        ({"text": ["a", "b"], "label": ["x", None]}, "row 2: 'label' is null"),
        ({"text": ["a", "b"], "label": [1.0, 1.5]}, "row 1: 'label' is float 1.0, not an integer"),
        ({"text": ["a", "b"], "label": [True, False]}, "row 1: 'label' is bool True, not an"),
        ({"text": ["a", None], "label": [1, 2]}, "row 2: 'text' is null"),
        ({"text": [3, 4], "label": [1, 2]}, "row 1: 'text' is int 3, not a string"),
        ({"text": [b"a" * 500], "label": [1]}, "row 1: 'text' is bytes b'aaaaaa"),
        ({"text": [["a"]], "label": [1]}, "row 1: 'text' is list ['a'], not a string"),
    ],
)
def test_a_hostile_parquet_file_is_an_error_naming_the_file_and_the_row_or_column(
    tmp_path: Path, columns: dict[str, Any], words: str
) -> None:
    parquet = write_parquet(tmp_path / "reviews.parquet", columns)
    with pytest.raises(DatasetError) as caught:
        load_text(parquet)
    message = str(caught.value)
    assert message.startswith(f"{parquet}: ") and words in message, message
    assert len(message) < 200, message  # a long value is abbreviated, never dumped


def test_a_file_that_is_not_parquet_is_an_error_naming_the_file(tmp_path: Path) -> None:
    good = write_parquet(tmp_path / "good.parquet", {"text": ["a", "b"], "label": [0, 1]}, 1)
    body = good.read_bytes()
    cases = {
        "json.parquet": b'{"text": "a", "label": 1}\n',
        "empty.parquet": b"",
        "cut.parquet": body[: len(body) // 2] + body[-8:],  # footer kept, pages cut
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DatasetError, match=rf"{name}: not a readable Parquet file \(.+\)"):
            load_text(tmp_path / name)
    (tmp_path / "folder.parquet").mkdir()
    with pytest.raises(DatasetError, match=r"folder\.parquet: not a readable Parquet file"):
        load_text(tmp_path / "folder.parquet")
    with pytest.raises(DatasetError, match=r"absent\.parquet: no such file"):
        load_text(tmp_path / "absent.parquet")
    empty = write_parquet(tmp_path / "none.parquet", {"text": [], "label": []})
    with pytest.raises(DatasetError, match=r"none\.parquet: no rows"):
        load_text(empty)


def test_without_pyarrow_a_parquet_file_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parquet = write_parquet(tmp_path / "reviews.parquet", {"text": ["a"], "label": [1]})
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what an absent package imports as
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DatasetError) as caught:
        load_text(parquet)
    assert str(caught.value) == (
        f"{parquet}: reading Parquet needs pyarrow; install the parquet extra "
        "(pip install 'mlmodelscope[parquet]')"
    )
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [r.split(">")[0] for r in extras["parquet"]] == ["pyarrow"]
    [everything] = extras["all"]  # what the dev environment (hack/test.sh) installs
    assert "parquet" in everything.removeprefix("mlmodelscope[").removesuffix("]").split(",")


def test_rendered_shapes_read_back_as_coco_and_masks_and_score_perfectly_against_themselves(
    tmp_path: Path,
) -> None:
    """The synthetic detection and segmentation set through the readers and the metrics:
    its own boxes as detections give AP 1, its own masks as predictions mIoU 1, and the same
    seed gives the same pixels and boxes."""
    from mlmodelscope.agent.tasks.detection import Detections, coco_map, coco_results, to_xyxy
    from mlmodelscope.agent.tasks.segmentation import confusion_matrix, segmentation_metrics
    from mlmodelscope.agent.tasks.shapes import CLASSES, write_shapes

    folder = write_shapes(tmp_path / "a", 12, seed=4)
    again = write_shapes(tmp_path / "b", 12, seed=4)
    assert json.loads(folder.annotations.read_text()) == json.loads(again.annotations.read_text())
    for name in ("00000.png", "00011.png"):
        assert np.array_equal(
            np.asarray(Image.open(folder.images / name)),
            np.asarray(Image.open(again.images / name)),
        )
    coco = load_coco(folder.annotations, folder.images)
    assert len(coco.images) == 12 and set(coco.categories.values()) == set(CLASSES)
    perfect = [
        Detections(
            to_xyxy(
                np.array(i.boxes).reshape(-1, 4), "xywh", normalized=False, height=64, width=64
            ),
            np.ones(len(i.boxes)),
            np.array(i.categories),
        )
        for i in coco.images
    ]
    assert (
        coco_map(coco.ground_truth, coco_results([i.id for i in coco.images], perfect)).map == 1.0
    )
    pairs = load_masks(folder.images, folder.masks).samples
    confusion = sum(
        confusion_matrix(np.asarray(Image.open(p.mask)), np.asarray(Image.open(p.mask)), 4)
        for p in pairs
    )
    assert segmentation_metrics(confusion).miou == 1.0
