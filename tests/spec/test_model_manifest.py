"""The Model kind and modelRef: validation, basedOn chains (overrides, unknown names,
cycles, depth), resolution into a runnable evaluation, sweeps of Models, and the CLI
(`mlms validate --models`, `mlms run --models`) on the real digits model."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_cases import DIGITS, SCALE, evaluation, model, ref_sweep
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.spec import SpecValidationError, expand, parse_evaluation, parse_sweep
from mlmodelscope.spec.manifest import (
    ANNOTATION_MANIFEST,
    MAX_BASED_ON,
    ModelManifest,
    UnresolvedModelError,
    lookup_in,
    parse_model,
    resolve_evaluation,
    resolve_model,
)
from mlmodelscope.spec.resources import FileModels, check_files, load_runnable

EXPORTS = DIGITS["spec"]["exports"]


def variant(name: str, base: str, **spec: Any) -> dict[str, Any]:
    return model(name, basedOn={"name": base}, **spec)


def catalog(*documents: dict[str, Any]) -> dict[str, ModelManifest]:
    return {d["metadata"]["name"]: parse_model(d) for d in documents}


def test_a_model_parses_and_keeps_its_labels() -> None:
    manifest = parse_model(DIGITS)
    assert manifest.spec.task == "image-classification"
    assert manifest.spec.model is not None and manifest.spec.model.format == "onnx"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(model("m"), "spec.model: set model, or basedOn", id="neither"),
        pytest.param(
            model("m", model=DIGITS["spec"]["model"], exports=[{"format": "onnx", "uri": "x"}]),
            "spec.exports: an export repeats model.format",
            id="export repeats the format",
        ),
        pytest.param(
            model("m", basedOn={"name": "Not_A_Name"}), "spec.basedOn.name", id="bad basedOn name"
        ),
        pytest.param(
            {**DIGITS, "spec": {**DIGITS["spec"], "tasks": "x"}},
            "did you mean 'task'",
            id="typo",
        ),
    ],
)
def test_bad_models_name_the_field(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_model(document)
    assert expected in str(info.value)
    assert "is not a valid Model" in str(info.value)


# --------------------------------------------------------------------------------- basedOn


def test_based_on_inherits_what_it_does_not_set() -> None:
    models = catalog(
        DIGITS,
        variant("unscaled", "digits-cnn", preprocessing=[SCALE[1]], task="pitfall-demo"),
        variant("unscaled-2", "unscaled", dataset="digits-v2"),
    )
    resolved = resolve_model("unscaled-2", lookup_in(models))
    assert [m.metadata.name for m in resolved.chain] == ["unscaled-2", "unscaled", "digits-cnn"]
    assert resolved.model == models["digits-cnn"].spec.model
    assert [s.op for s in resolved.preprocessing or []] == ["layout"]
    assert resolved.postprocessing == models["digits-cnn"].spec.postprocessing
    assert (resolved.task, resolved.dataset) == ("pitfall-demo", "digits-v2")
    assert [e.format for e in resolved.exports] == ["torchscript"]


def test_a_variant_with_its_own_model_drops_the_base_exports() -> None:
    other = {**DIGITS["spec"]["model"], "uri": "file:///models/finetuned.onnx"}
    models = catalog(DIGITS, variant("tuned", "digits-cnn", model=other))
    resolved = resolve_model("tuned", lookup_in(models))
    assert resolved.model.uri == "file:///models/finetuned.onnx"
    assert resolved.exports == ()  # the base's TorchScript file is another network's bytes
    assert resolved.preprocessing == models["digits-cnn"].spec.preprocessing


@pytest.mark.parametrize(
    ("models", "name", "expected"),
    [
        pytest.param([DIGITS], "resnet", "Model 'resnet' not found; create it", id="unknown"),
        pytest.param(
            [variant("a", "gone")],
            "a",
            "Model 'a' is basedOn 'gone', and Model 'gone' not found",
            id="unknown base",
        ),
        pytest.param([variant("a", "a")], "a", "basedOn forms a cycle (a -> a)", id="self cycle"),
        pytest.param(
            [variant("a", "b"), variant("b", "c"), variant("c", "a")],
            "a",
            "basedOn forms a cycle (a -> b -> c -> a)",
            id="cycle",
        ),
        pytest.param(
            [variant("x", "a"), variant("a", "b"), variant("b", "a")],
            "x",
            "basedOn forms a cycle (a -> b -> a)",
            id="cycle below",
        ),
    ],
)
def test_unknown_models_and_cycles_are_refused(
    models: list[dict[str, Any]], name: str, expected: str
) -> None:
    with pytest.raises(UnresolvedModelError) as info:
        resolve_model(name, lookup_in(catalog(*models)))
    assert info.value.problem.path == "spec.modelRef.name"
    assert expected in info.value.problem.message


def test_chains_are_capped() -> None:
    chain = [DIGITS] + [
        variant(f"v{i}", "digits-cnn" if i == 0 else f"v{i - 1}") for i in range(MAX_BASED_ON)
    ]
    models = lookup_in(catalog(*chain))
    assert len(resolve_model(f"v{MAX_BASED_ON - 2}", models).chain) == MAX_BASED_ON
    with pytest.raises(UnresolvedModelError, match=f"longer than {MAX_BASED_ON} Models"):
        resolve_model(f"v{MAX_BASED_ON - 1}", models)


# ----------------------------------------------------------------------- resolving an evaluation


def test_an_evaluation_takes_model_processing_and_records_the_versions() -> None:
    stored = copy.deepcopy(DIGITS)
    stored["metadata"].update(uid="u-1", resourceVersion="42")
    document = resolve_evaluation(evaluation(), lookup_in(catalog(stored)), "e")
    assert "modelRef" not in document["spec"]
    resolved = parse_evaluation(document)
    assert resolved.spec.model.uri == "file:///models/digits.onnx"
    assert [s.op for s in resolved.spec.preprocessing] == ["scale", "layout"]
    assert [s.op for s in resolved.spec.postprocessing] == ["softmax", "topk"]
    record = json.loads(resolved.metadata.annotations[ANNOTATION_MANIFEST])
    assert record == {
        "name": "digits-cnn",
        "namespace": "team",
        "chain": [{"name": "digits-cnn", "uid": "u-1", "resource_version": "42"}],
        "task": "image-classification",
        "dataset": "digits",
    }


def test_the_evaluation_processing_replaces_the_models() -> None:
    models = lookup_in(catalog(DIGITS))
    own = parse_evaluation(resolve_evaluation(evaluation(preprocessing=[SCALE[1]]), models, "e"))
    assert [s.op for s in own.spec.preprocessing] == ["layout"]
    none = parse_evaluation(resolve_evaluation(evaluation(postprocessing=[]), models, "e"))
    assert none.spec.postprocessing == []  # explicitly empty: raw outputs, not the Model's


def test_each_framework_gets_the_format_it_loads() -> None:
    models = lookup_in(catalog(DIGITS))
    torch = parse_evaluation(resolve_evaluation(evaluation("pytorch"), models, "e"))
    assert (torch.spec.model.format, torch.spec.model.uri) == (
        "torchscript",
        "file:///models/digits.torchscript.pt",
    )
    with pytest.raises(SpecValidationError) as info:
        resolve_evaluation(evaluation("tensorflow"), models, "e")
    assert (
        "spec.modelRef.name: Model 'digits-cnn' is available as onnx, torchscript, and "
        "framework 'tensorflow' loads savedmodel: add an export" in str(info.value)
    )


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"model": DIGITS["spec"]["model"]}, id="both"),
        pytest.param({"modelRef": None}, id="neither"),
    ],
)
def test_model_and_model_ref_are_exclusive(spec: dict[str, Any]) -> None:
    document = evaluation(**spec)
    document["spec"] = {k: v for k, v in document["spec"].items() if v is not None}
    with pytest.raises(SpecValidationError, match="set exactly one of model, modelRef"):
        resolve_evaluation(document, lookup_in(catalog(DIGITS)), "e")
        parse_evaluation(document)


def test_an_unresolved_reference_says_how_to_give_the_model() -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_evaluation(evaluation())
    assert "spec.modelRef: names Model 'digits-cnn', which was not given" in str(info.value)
    assert "--models" in str(info.value)


# ------------------------------------------------------------------------------------ sweeps


def test_sweep_children_name_the_model_and_resolve_it_themselves() -> None:
    models = lookup_in(catalog(DIGITS, variant("unscaled", "digits-cnn", preprocessing=[])))
    document = ref_sweep(
        {"name": "ok", "modelRef": {"name": "digits-cnn"}},
        {"name": "bad", "modelRef": {"name": "unscaled"}},
    )
    children = expand(parse_sweep(document, models=models), models)
    assert [c.name for c in children] == [
        "s-ok-onnxruntime", "s-ok-pytorch", "s-bad-onnxruntime", "s-bad-pytorch",
    ]  # fmt: skip
    first = children[0].document["spec"]
    assert first["modelRef"] == {"name": "digits-cnn"} and "model" not in first
    assert "preprocessing" not in first  # the child takes the Model's when it starts
    torch = parse_evaluation(resolve_evaluation(children[3].document, models, "c"))
    assert torch.spec.model.format == "torchscript" and torch.spec.preprocessing == []


@pytest.mark.parametrize(
    ("models", "entries", "frameworks", "expected"),
    [
        pytest.param(
            [DIGITS],
            [{"name": "x", "modelRef": {"name": "resnet"}}],
            None,
            "spec.matrix.models[0].modelRef.name: Model 'resnet' not found",
            id="unknown",
        ),
        pytest.param(
            [variant("a", "b"), variant("b", "a")],
            [{"name": "x", "modelRef": {"name": "a"}}],
            None,
            "spec.matrix.models[0].modelRef.name: Model 'a': basedOn forms a cycle",
            id="cycle",
        ),
        pytest.param(
            [DIGITS],
            [{"name": "x", "modelRef": {"name": "digits-cnn"}}],
            ["onnxruntime", "tensorflow"],
            "spec.matrix.models[0]: Model 'digits-cnn' is available as onnx, torchscript, and "
            "framework 'tensorflow' loads savedmodel",
            id="no format for a framework",
        ),
        pytest.param(
            [DIGITS],
            [
                {
                    "name": "x",
                    "modelRef": {"name": "digits-cnn"},
                    "exports": DIGITS["spec"]["exports"],
                }
            ],
            None,
            "spec.matrix.models[0].exports: exports go with an inline model",
            id="exports beside a ref",
        ),
        pytest.param(
            [DIGITS],
            [{"name": "x", "modelRef": {"name": "digits-cnn"}, "model": DIGITS["spec"]["model"]}],
            None,
            "set exactly one of model, modelRef",
            id="both",
        ),
    ],
)
def test_hostile_model_sweeps_are_refused(
    models: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    frameworks: list[str] | None,
    expected: str,
) -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_sweep(ref_sweep(*entries, frameworks=frameworks), models=lookup_in(catalog(*models)))
    assert expected in str(info.value)


def test_without_models_a_sweep_checks_only_the_schema_of_ref_children() -> None:
    """What the operator does once every child exists: a Model deleted since must not turn a
    finished sweep Failed."""
    document = ref_sweep({"name": "x", "modelRef": {"name": "gone"}})
    assert len(expand(parse_sweep(document))) == 2


# ------------------------------------------------------------------------------------------ CLI


def write_yaml(path: Path, *documents: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def test_validate_resolves_against_the_files_and_models_given(tmp_path: Path) -> None:
    models = write_yaml(tmp_path / "catalog" / "digits.yaml", DIGITS, variant("v", "digits-cnn"))
    broken = write_yaml(tmp_path / "catalog" / "loop.yaml", variant("a", "b"), variant("b", "a"))
    runs = write_yaml(tmp_path / "runs.yaml", evaluation(), evaluation("tensorflow"))
    swept = write_yaml(tmp_path / "sweep.yaml", ref_sweep({"name": "x", "modelRef": {"name": "a"}}))
    runner = CliRunner()
    alone = runner.invoke(app, ["validate", str(runs)])
    assert alone.exit_code == 1
    assert "Model 'digits-cnn' not found: no Models were given; pass the file" in alone.output
    given = runner.invoke(app, ["validate", str(runs), "--models", str(models)])
    assert given.exit_code == 1
    assert "runs.yaml (document 1, e)" in given.output
    assert "framework 'tensorflow' loads savedmodel" in given.output
    folder = runner.invoke(app, ["validate", str(tmp_path / "catalog"), str(swept)])
    assert folder.exit_code == 1
    assert "✓" in folder.output and "loop.yaml (document 1, a)" in folder.output
    assert "spec.matrix.models[0].modelRef.name: Model 'a': basedOn forms a cycle" in folder.output
    assert "(in child" not in folder.output.split("cycle")[1].split("\n")[0]
    assert broken.exists()


def test_a_model_defined_twice_is_refused(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", DIGITS)
    write_yaml(tmp_path / "b.yaml", DIGITS)
    found = FileModels.read([tmp_path])
    assert len(found.errors) == 1
    assert "Model 'digits-cnn' is also defined in" in str(found.errors[0])


def test_relative_uris_resolve_against_the_model_file(tmp_path: Path) -> None:
    relative = copy.deepcopy(DIGITS)
    relative["spec"]["model"]["uri"] = "../models/digits.onnx"
    write_yaml(tmp_path / "catalog" / "digits.yaml", relative)
    spec = write_yaml(tmp_path / "elsewhere" / "eval.yaml", evaluation())
    (loaded,) = load_runnable(spec, [tmp_path / "catalog"])
    assert loaded.evaluation.spec.model.uri == str(tmp_path / "models" / "digits.onnx")
    record = json.loads(loaded.evaluation.metadata.annotations[ANNOTATION_MANIFEST])
    assert record["chain"][0]["source"].startswith(str(tmp_path / "catalog" / "digits.yaml"))


def test_check_files_reports_broken_models_of_models_folders(tmp_path: Path) -> None:
    write_yaml(tmp_path / "catalog" / "bad.yaml", model("m"))
    spec = write_yaml(tmp_path / "eval.yaml", evaluation())
    checked, unusable = check_files([spec], [tmp_path / "catalog"])
    assert [str(e.problems[0]) for e in unusable] == ["spec.model: set model, or basedOn to "
                                                      "take it from another Model"]  # fmt: skip
    assert checked[0].error is not None


def test_run_evaluates_a_referenced_model_and_records_the_manifest(
    tmp_path: Path, digits_models: Path
) -> None:
    """The real agent on the real digits model, through a Model and a basedOn variant."""
    base = copy.deepcopy(DIGITS)
    base["spec"]["model"]["uri"] = str(digits_models / "digits.onnx")
    base["spec"]["exports"] = []
    bad = variant("digits-255", "digits-cnn", preprocessing=[
        {"scale": {"factor": 1 / 255}}, {"layout": {"from": "HWC", "to": "CHW"}},
    ])  # fmt: skip
    models = write_yaml(tmp_path / "catalog.yaml", base, bad)
    quick = {"type": "Offline", "batchSizes": [32], "warmup": 1, "minQueryCount": 2,
             "minDuration": "10ms"}  # fmt: skip
    good_run = evaluation(scenario=quick)
    bad_run = evaluation(scenario=quick, modelRef={"name": "digits-255"})
    bad_run["metadata"]["name"] = "e-255"
    spec = write_yaml(tmp_path / "eval.yaml", good_run, bad_run)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", str(spec), "--models", str(models), "--no-store", "-o", str(out)],
        env={**os.environ, "OTEL_SDK_DISABLED": "true"},
    )
    assert result.exit_code == 0, result.output
    good = json.loads((out / "e.json").read_text())
    worse = json.loads((out / "e-255.json").read_text())
    assert good["evaluation"]["model_manifest"]["chain"][0]["name"] == "digits-cnn"
    assert [m["name"] for m in worse["evaluation"]["model_manifest"]["chain"]] == [
        "digits-255",
        "digits-cnn",
    ]
    assert good["spec"]["preprocessing"][0] == {"scale": {"factor": 0.0625}}
    assert good["accuracy"]["top1"] > 0.9
    assert worse["accuracy"]["top1"] < good["accuracy"]["top1"] - 0.3


def test_validate_checks_every_models_chain_and_reads_a_file_once(tmp_path: Path) -> None:
    catalog_dir = tmp_path / "catalog"
    write_yaml(catalog_dir / "digits.yaml", DIGITS)
    write_yaml(catalog_dir / "orphan.yaml", variant("orphan", "gone"))
    write_yaml(catalog_dir / "loop.yaml", variant("a", "b"), variant("b", "a"))
    checked, unusable = check_files([catalog_dir / "digits.yaml", catalog_dir], [catalog_dir])
    assert unusable == []
    errors = {c.source.split("/")[-1]: str(c.error) for c in checked if c.error}
    assert sorted(errors) == ["loop.yaml (document 1, a)", "loop.yaml (document 2, b)",
                              "orphan.yaml (document 1, orphan)"]  # fmt: skip
    assert "Model 'orphan' is basedOn 'gone', and Model 'gone' not found" in str(errors)
    assert "spec.basedOn.name: Model 'a': basedOn forms a cycle (a -> b -> a)" in str(errors)
    assert len(checked) == 4  # digits.yaml named twice, read once


def test_validate_of_a_sweep_with_an_unknown_model_names_both_fixes(tmp_path: Path) -> None:
    """A sweep's modelRef that no file given defines: the cluster's fix (kubectl apply) and
    the CLI's (--models), since the same check runs in both places."""
    swept = write_yaml(tmp_path / "sweep.yaml", ref_sweep({"name": "x", "modelRef": {"name": "m"}}))
    result = CliRunner().invoke(app, ["validate", str(swept)])
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "spec.matrix.models[0].modelRef.name: Model 'm' not found" in message
    assert "kubectl apply -f examples/catalog/" in message
    assert "mlms validate or mlms run (--models DIR)" in message


def test_an_unknown_model_in_a_cluster_keeps_the_clusters_fix() -> None:
    """Where the caller says where it looked (a namespace), the message says kubectl apply."""
    with pytest.raises(UnresolvedModelError) as info:
        resolve_model("m", lookup_in({}), where="not found in namespace 'team'")
    assert info.value.problem.message == (
        "Model 'm' not found in namespace 'team'; create it (e.g. kubectl apply -f "
        "examples/catalog/) or correct the name"
    )
