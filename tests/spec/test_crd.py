"""The CRD is generated from the models, structural, and carries the cross-field rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mlmodelscope.spec import load_evaluations
from mlmodelscope.spec.crd import CRD_FILENAME, build_crd, render_crds, stale_crds

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(
    [*(ROOT / "examples").glob("*.yaml"), *(ROOT / "examples").glob("cluster/*.yaml")]
)


def schema() -> dict[str, Any]:
    crd = build_crd()
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")


def test_committed_crd_matches_the_models() -> None:
    assert stale_crds(ROOT / "crds") == [], "crds/ is out of date: run `mlms crd`"
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(render_crds())


def test_crd_identity() -> None:
    crd = build_crd()
    assert crd["metadata"]["name"] == "modelevaluations.mlmodelscope.io"
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["meval"]
    assert names["categories"] == ["mlmodelscope"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Phase", "Model", "ModelRef", "Framework", "Device", "Scenario", "p50(ms)",
        "Throughput", "Metric", "Value", "Recorded", "Age",
    ]  # fmt: skip


def test_schema_is_structural() -> None:
    for path, node in walk(schema()):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not node.get("x-kubernetes-preserve-unknown-fields"), f"{path} keeps unknowns"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "not", "additionalItems", "uniqueItems"):
            assert banned not in node, f"{path} uses {banned}"
        if node.get("type") == "object" and path not in ("", ".metadata"):
            has_fields = "properties" in node or "additionalProperties" in node
            assert has_fields, f"{path}: an object with no declared fields hides typos"
        assert node.get("additionalProperties") is not False, path


def test_every_field_is_described() -> None:
    for path, node in walk(schema()):
        # list items and map values are described by their field; metadata may not carry one
        if not path.endswith(("[]", ".*")) and path != ".metadata":
            assert node.get("description"), f"{path} has no description (kubectl explain)"


def test_cel_rules_for_cross_field_constraints() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    rules = lambda node: [r["rule"] for r in node.get("x-kubernetes-validations", [])]  # noqa: E731
    scenario = rules(spec["scenario"])
    assert "!has(self.type) || self.type != 'Server' || has(self.targetQPS)" in scenario
    assert any("exists_one" in r and "batchSizes" in r for r in scenario)
    assert "!has(self.batchSizes) || self.batchSizes.all(b, b > 0)" in scenario
    assert any(
        "self.gpus == 0" in r and "self.device == 'gpu'" in r for r in rules(spec["hardware"])
    )
    assert rules(spec["preprocessing"]["items"])[0].endswith(".exists_one(x, x)")
    for _, node in walk(schema()):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"] and rule["reason"].startswith("FieldValue")
    # CEL cost estimation needs bounded lists
    for path, node in walk(schema()):
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path} needs maxItems for CEL cost estimation"


def strict(node: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as JSON Schema draft 4 that rejects unknown fields (as kubectl's strict
    field validation does) - for validating examples without a cluster."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes")}
    if "properties" in node:
        out["properties"] = {k: strict(v) for k, v in node["properties"].items()}
        if node["properties"] and "metadata" not in node["properties"]:
            out["additionalProperties"] = False
    if "items" in node:
        out["items"] = strict(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(node["additionalProperties"])
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_examples_validate_against_the_crd_schema(example: Path) -> None:
    validator = jsonschema.Draft4Validator(strict(schema()))
    for document in yaml.safe_load_all(example.read_text()):
        errors = sorted(validator.iter_errors(document), key=str)
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    assert load_evaluations(example)


def test_crd_schema_rejects_a_typo() -> None:
    validator = jsonschema.Draft4Validator(strict(schema()))
    document = yaml.safe_load((ROOT / "examples" / "digits-server.yaml").read_text())
    document["spec"]["scenario"]["targetQps"] = 10
    assert any("targetQps" in e.message for e in validator.iter_errors(document))


def test_metadata_is_left_to_the_api_server() -> None:
    """kube-apiserver rejects a CRD whose metadata schema says more than its type."""
    assert schema()["properties"]["metadata"] == {"type": "object"}


def test_crd_file_name() -> None:
    assert CRD_FILENAME == "mlmodelscope.io_modelevaluations.yaml"
