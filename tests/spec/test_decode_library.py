"""The decode step's ``library`` (Pitfall P1): Pillow by default, OpenCV when asked, anything
else refused at the field, in the Python check and in the CRD's schema alike."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from mlmodelscope.spec.crd import build_crd
from mlmodelscope.spec.evaluation import PreprocessStep


def _decode_schema() -> dict[str, Any]:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    step: dict[str, Any] = spec["properties"]["preprocessing"]["items"]
    return step["properties"]["decode"]


def test_pillow_is_the_default_and_unset_keeps_the_spec_hash() -> None:
    """Unset means Pillow and stays out of the spec's canonical JSON, so a spec written before
    the field hashes as it did (results keep grouping with earlier runs)."""
    step = PreprocessStep.model_validate({"decode": {"mode": "L"}})
    assert step.decode is not None and step.decode.library is None
    assert step.model_dump(mode="json", exclude_none=True) == {"decode": {"mode": "L"}}
    opencv = PreprocessStep.model_validate({"decode": {"library": "opencv"}})
    assert opencv.decode is not None and opencv.decode.library == "opencv"


def test_an_unknown_library_is_refused_at_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        PreprocessStep.model_validate({"decode": {"library": "cv2"}})
    assert caught.value.errors()[0]["loc"] == ("decode", "library")


def test_the_crd_schema_has_the_same_choice() -> None:
    schema = _decode_schema()
    library = schema["properties"]["library"]
    assert set(library["enum"]) >= {"pillow", "opencv"} and "default" not in library
    jsonschema.validate({"mode": "RGB", "library": "opencv"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"library": "turbojpeg"}, schema)
