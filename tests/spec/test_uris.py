"""pvc:// URIs: the one parser the operator (claims to check and mount) and the agent share."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from mlmodelscope.spec import EvaluationSpec, SpecError
from mlmodelscope.spec.evaluation import PostprocessStep
from mlmodelscope.spec.uris import PvcUri, parse_pvc_uri, pvc_claims, spec_files

SPEC = {
    "model": {
        "name": "digits",
        "uri": "pvc://models/digits.onnx",
        "format": "onnx",
        "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        "outputs": [{"name": "logits", "shape": [-1, 10]}],
    },
    "framework": {"name": "onnxruntime"},
    "dataset": {"type": "digits"},
}


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("pvc://models/digits/model.onnx", PvcUri("models", PurePosixPath("digits/model.onnx"))),
        ("pvc://models", PvcUri("models", PurePosixPath("."))),
        ("pvc://models/", PvcUri("models", PurePosixPath("."))),
        ("pvc://m.example/./a//b", PvcUri("m.example", PurePosixPath("a/b"))),
        ("pvc://models//etc/passwd", PvcUri("models", PurePosixPath("etc/passwd"))),
    ],
)
def test_a_pvc_uri_is_a_claim_and_a_path_inside_it(uri: str, parsed: PvcUri) -> None:
    assert parse_pvc_uri(uri) == parsed
    assert not parsed.path.is_absolute()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("pvc:///etc/passwd", "names no claim; write pvc://<claim>/<path>"),
        ("pvc://", "names no claim"),
        ("s3://bucket/key", "names no claim"),
        ("pvc://models/../other/x.onnx", "must not contain '..'; give a path inside the claim"),
        ("pvc://models/a/..", "must not contain '..'"),
    ],
)
def test_a_malformed_pvc_uri_names_its_field(uri: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        parse_pvc_uri(uri, "spec.dataset.uri")
    assert caught.value.field == "spec.dataset.uri"
    assert str(caught.value).startswith(f"spec.dataset.uri: {uri!r} ")


def test_pvc_claims_of_the_model_then_the_dataset_each_once() -> None:
    spec = EvaluationSpec.model_validate(SPEC)
    assert pvc_claims(spec) == ["models"]
    for dataset_uri, claims in [
        ("pvc://data/val", ["models", "data"]),
        ("pvc://models/val", ["models"]),
        ("https://example.com/val.tar", ["models"]),
    ]:
        dataset = spec.dataset.model_copy(update={"uri": dataset_uri})
        assert pvc_claims(spec.model_copy(update={"dataset": dataset})) == claims
    model = spec.model.model_copy(update={"uri": "file:///models/digits.onnx"})
    assert pvc_claims(spec.model_copy(update={"model": model})) == []


def test_every_file_the_spec_names_counts_for_its_claims() -> None:
    """A detection dataset's images and annotations, a tokenizer, a labels file: each on its
    own claim is mounted (the operator mounts pvc_claims), each claim once, in spec order."""
    spec = EvaluationSpec.model_validate(SPEC)
    dataset = spec.dataset.model_copy(
        update={
            "path": "pvc://images/val",
            "annotations": "pvc://annotations/instances.json",
            "tokenizer": "pvc://images/tokenizer.json",
        }
    )
    labels = PostprocessStep.model_validate({"labels": {"uri": "pvc://labels/names.txt"}})
    changed = spec.model_copy(update={"dataset": dataset, "postprocessing": [labels]})
    assert pvc_claims(changed) == ["models", "images", "annotations", "labels"]
    fields = [f.field for f in spec_files(changed)]
    assert fields == [
        "spec.model.uri",
        "spec.dataset.path",
        "spec.dataset.annotations",
        "spec.dataset.tokenizer",
        "spec.postprocessing[0].labels.uri",
    ]


@pytest.mark.parametrize("field", ["path", "annotations", "masks", "targets", "tokenizer"])
def test_a_malformed_pvc_path_in_any_dataset_field_is_refused_naming_it(field: str) -> None:
    document = {**SPEC, "dataset": {**SPEC["dataset"], field: "pvc://data/../../etc/passwd"}}
    with pytest.raises(ValueError, match=f"dataset\n.*{field}: a pvc:// path must not contain"):
        EvaluationSpec.model_validate(document)
