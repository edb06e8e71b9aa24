"""EvaluationSweep: validation, and the expansion into child ModelEvaluations (order, names,
labels, defaults, overrides), including the hostile sweeps admission must refuse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_cases import EXPORTS, HOSTILE, MODEL, SWEEP, sweep, with_spec
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.spec import (
    LABEL_SWEEP,
    MAX_CHILDREN,
    EvaluationSpec,
    ScenarioType,
    SpecValidationError,
    SweepStatus,
    expand,
    parse_evaluation,
    parse_sweep,
    sweep_problems,
)
from mlmodelscope.spec.resources import check_files
from mlmodelscope.spec.sweep import (
    LABEL_BATCH_SIZE,
    LABEL_CELL,
    LABEL_DEVICE,
    LABEL_FRAMEWORK,
    LABEL_GPU_PRODUCT,
    LABEL_MODEL,
    LABEL_REPEAT,
    LABEL_SCENARIO,
    MAX_CHILD_NAME,
    SweepTemplate,
)

ROOT = Path(__file__).parents[2]
CATALOG = ROOT / "examples" / "catalog"
EXAMPLE_FILES = sorted((ROOT / "examples").rglob("*.yaml"))
RESOURCE_EXAMPLES = [
    p
    for p in EXAMPLE_FILES
    if p.parent.name != "gitops"
    and "kind: " in (text := p.read_text())
    and (
        p.parent.name != "ci"
        or text.lstrip().startswith("apiVersion: mlmodelscope.io/")
        or "\napiVersion: mlmodelscope.io/" in text
    )
]
"""Every example of this project's kinds; examples/gitops and the CI tools' files in
examples/ci (GitHub Actions, Argo Workflows) are checked by their own tests."""
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecValidationError) as info:
        parse_sweep(document)
    assert info.value.kind == "EvaluationSweep"
    return [str(p) for p in info.value.problems]


# ------------------------------------------------------------------------------- expansion


def full_matrix() -> dict[str, Any]:
    second = {"name": "other", "model": {**MODEL, "name": "other"}, "exports": EXPORTS}
    document = sweep(
        models=[SWEEP["spec"]["matrix"]["models"][0], second],
        frameworks=["onnxruntime", "pytorch"],
        hardware=[{"device": "cpu"}, {"device": "gpu", "gpuProduct": "NVIDIA-A100-SXM4-80GB"}],
        scenarios=["SingleStream", "Offline"],
        batchSizes=[1, 8],
    )
    document["metadata"]["name"] = "full"
    return document


def test_expansion_order_names_and_labels() -> None:
    children = expand(parse_sweep(full_matrix()))
    assert len(children) == 2 * 2 * 2 * 2 * 2
    assert [c.name for c in children[:5]] == [
        "full-digits-onnxruntime-cpu-singlestream-b1",
        "full-digits-onnxruntime-cpu-singlestream-b8",
        "full-digits-onnxruntime-cpu-offline-b1",
        "full-digits-onnxruntime-cpu-offline-b8",
        "full-digits-onnxruntime-gpu-a100-sxm4-80gb-singlestream-b1",
    ]
    assert children[-1].name == "full-other-pytorch-gpu-a100-sxm4-80gb-offline-b8"
    assert len({c.name for c in children}) == len(children)
    gpu = children[4]
    assert gpu.axes == {
        "model": "digits",
        "framework": "onnxruntime",
        "device": "gpu",
        "gpuProduct": "NVIDIA-A100-SXM4-80GB",
        "scenario": "SingleStream",
        "batchSize": "1",
    }
    assert gpu.document["metadata"] == {
        "name": gpu.name,
        "labels": {
            LABEL_SWEEP: "full",
            LABEL_MODEL: "digits",
            LABEL_FRAMEWORK: "onnxruntime",
            LABEL_DEVICE: "gpu",
            LABEL_SCENARIO: "SingleStream",
            LABEL_GPU_PRODUCT: "NVIDIA-A100-SXM4-80GB",
            LABEL_BATCH_SIZE: "1",
        },
    }
    spec = gpu.document["spec"]
    assert spec["hardware"] == {"device": "gpu", "gpuProduct": "NVIDIA-A100-SXM4-80GB"}
    assert spec["scenario"] == {"type": "SingleStream", "batchSizes": [1]}
    for child in children:
        evaluation = parse_evaluation(child.document)  # a complete, valid ModelEvaluation
        assert "namespace" not in child.document["metadata"]
        assert "ownerReferences" not in child.document["metadata"]
        assert evaluation.spec.framework.name.value == child.axes["framework"]


def test_expansion_is_deterministic() -> None:
    first = [(c.name, c.document) for c in expand(parse_sweep(full_matrix()))]
    assert first == [(c.name, c.document) for c in expand(parse_sweep(full_matrix()))]


def test_defaults_come_from_the_template() -> None:
    document = with_spec(
        sweep(frameworks=["onnxruntime", "tensorflow"]),
        template={
            "dataset": {"type": "digits"},
            "scenario": {"type": "Offline", "batchSizes": [1, 32]},
            "hardware": {"device": "cpu", "resources": {"limits": {"cpu": "2"}}},
        },
    )
    children = expand(parse_sweep(document))
    assert [c.name for c in children] == ["s-digits-onnxruntime", "s-digits-tensorflow"]
    for child in children:
        spec = parse_evaluation(child.document).spec
        assert spec.scenario.batch_sizes == [1, 32]  # one child measures all of them
        assert spec.scenario.type == "Offline"
        assert spec.hardware.resources.limits.cpu == "2"
        assert "batchSize" not in child.axes
        assert LABEL_BATCH_SIZE not in child.document["metadata"]["labels"]
    assert children[0].axes == {
        "model": "digits", "framework": "onnxruntime", "device": "cpu", "scenario": "Offline",
    }  # fmt: skip


def test_each_framework_gets_the_format_it_loads() -> None:
    children = expand(parse_sweep(sweep(frameworks=["onnxruntime", "pytorch", "tensorflow"])))
    formats = {c.axes["framework"]: c.document["spec"]["model"] for c in children}
    assert formats["onnxruntime"]["uri"].endswith("digits.onnx")
    assert formats["pytorch"]["format"] == "torchscript"
    assert formats["pytorch"]["uri"].endswith(".torchscript.pt")
    assert formats["tensorflow"]["format"] == "savedmodel"
    assert formats["tensorflow"]["inputs"] == formats["onnxruntime"]["inputs"]


def test_a_model_without_a_loadable_format_names_the_entry() -> None:
    document = sweep(
        models=[{"name": "digits", "model": MODEL}], frameworks=["onnxruntime", "pytorch"]
    )
    [problem] = problems(document)
    assert problem.startswith("spec.matrix.models[0]: framework 'pytorch'")
    assert "exports" in problem


def test_model_processing_replaces_the_template() -> None:
    document = with_spec(
        sweep(
            models=[
                {"name": "plain", "model": MODEL},
                {"name": "scaled", "model": MODEL, "preprocessing": [{"scale": {"factor": 2}}]},
                {"name": "none", "model": MODEL, "preprocessing": []},
            ]
        ),
        template={
            "dataset": {"type": "digits"},
            "preprocessing": [{"scale": {"factor": 0.0625}}],
            "postprocessing": [{"softmax": {}}],
        },
    )
    specs = [parse_evaluation(c.document).spec for c in expand(parse_sweep(document))]
    assert [[s.scale.factor for s in spec.preprocessing if s.scale] for spec in specs] == [
        [0.0625],
        [2.0],
        [],
    ]
    assert all(spec.postprocessing[0].softmax is not None for spec in specs)


TASKS = ROOT / "examples" / "sweeps" / "tasks-frameworks.yaml"


def test_models_entries_bring_their_own_dataset_and_task() -> None:
    """examples/sweeps/tasks-frameworks.yaml: three tasks x three frameworks in one sweep,
    the template holding neither dataset nor task; each child has its entry's pair."""
    children = expand(parse_sweep(yaml.safe_load(TASKS.read_text())))
    assert len(children) == 9
    pairs = {
        (c.axes["model"], c.axes["framework"]): (
            c.document["spec"]["task"]["type"],
            c.document["spec"]["dataset"]["type"],
        )
        for c in children
    }
    expected = {
        "detector": ("detection", "coco"),
        "segmenter": ("segmentation", "masks"),
        "text": ("text-classification", "text"),
    }
    assert pairs == {
        (m, f): expected[m] for m in expected for f in ("onnxruntime", "pytorch", "tensorflow")
    }
    for child in children:
        spec = parse_evaluation(child.document).spec
        images = child.axes["model"] != "text"
        assert bool(spec.preprocessing) == images  # the text entry's [] replaces the steps
        claims = {spec.model.uri.split("/")[2], (spec.dataset.path or "").split("/")[2]}
        assert claims == {"mlmodelscope-tasks"}  # data on the model's claim: it is mounted


def test_an_entry_dataset_or_task_replaces_the_template_only_for_its_children() -> None:
    text = yaml.safe_load(TASKS.read_text())["spec"]["matrix"]["models"][2]
    document = sweep(models=[SWEEP["spec"]["matrix"]["models"][0], text])
    plain, tokens = (parse_evaluation(c.document).spec for c in expand(parse_sweep(document)))
    assert (plain.task.type, plain.dataset.type) == ("classification", "digits")
    assert (tokens.task.type, tokens.dataset.type) == ("text-classification", "text")
    assert tokens.task.num_classes == 4 and tokens.dataset.max_length == 32


def test_a_task_that_does_not_fit_its_dataset_names_the_entry() -> None:
    """The ModelEvaluation's task/dataset rules hold for every child, pointing at the field
    of the entry that broke them (its task, or its dataset against the template's task)."""
    detector = {"name": "det", "model": MODEL, "task": {"type": "detection"}}
    [problem] = problems(sweep(models=[SWEEP["spec"]["matrix"]["models"][0], detector]))
    assert problem.startswith("spec.matrix.models[1].task: a detection or text-detection task")
    assert problem.endswith("(in child s-det-onnxruntime)")
    coco = {"type": "coco", "path": "images", "annotations": "instances.json"}
    unlabelled = {"name": "det", "model": MODEL, "dataset": coco}
    [problem] = problems(sweep(models=[unlabelled]))
    assert problem.startswith("spec.matrix.models[0].dataset: a detection or text-detection")
    template = {"dataset": {"type": "digits"}, "task": {"type": "text-classification"}}
    [problem] = problems(with_spec(sweep(), template=template))  # the entry sets neither
    assert problem.startswith("spec.template.task: a text-classification task needs a text")


def test_hardware_axis_overrides_device_and_product() -> None:
    document = with_spec(
        sweep(hardware=[{"device": "cpu"}, {"device": "gpu"}]),
        template={
            "dataset": {"type": "digits"},
            "hardware": {"gpus": 2, "gpuProduct": "Tesla-T4", "runtimeClassName": "nvidia"},
        },
    )
    cpu, gpu = (parse_evaluation(c.document).spec.hardware for c in expand(parse_sweep(document)))
    assert (cpu.device, cpu.gpus, cpu.gpu_product) == ("cpu", 0, None)
    assert (gpu.device, gpu.gpus, gpu.gpu_product) == ("gpu", 2, None)
    assert cpu.runtime_class_name == gpu.runtime_class_name == "nvidia"


def test_scenarios_axis_gives_target_qps_to_server_children_only() -> None:
    document = with_spec(
        sweep(scenarios=["Offline", "Server"]),
        template={"dataset": {"type": "digits"}, "scenario": {"targetQPS": "auto"}},
    )
    offline, server = (parse_evaluation(c.document).spec for c in expand(parse_sweep(document)))
    assert offline.scenario.target_qps is None
    assert server.scenario.target_qps == "auto"


def test_a_server_child_without_target_qps_is_a_problem() -> None:
    [problem] = problems(sweep(scenarios=["Offline", "Server"]))
    assert problem.startswith("spec.template.scenario.targetQPS: required when type is Server")
    assert "(in child s-digits-onnxruntime-server)" in problem


def test_gpus_in_the_template_on_cpu_names_the_template() -> None:
    document = with_spec(sweep(), template={"dataset": {"type": "digits"}, "hardware": {"gpus": 1}})
    assert problems(document) == [
        "spec.template.hardware.gpus: gpus > 0 needs device: gpu (in child s-digits-onnxruntime)"
    ]


def test_gpu_product_on_a_cpu_target_names_the_axis_entry() -> None:
    document = sweep(hardware=[{"device": "gpu"}, {"device": "cpu", "gpuProduct": "Tesla-T4"}])
    assert problems(document) == [
        "spec.matrix.hardware[1].gpuProduct: gpuProduct needs device: gpu"
    ]


def test_execution_provider_problems_reach_the_template() -> None:
    document = with_spec(
        sweep(),
        template={"dataset": {"type": "synthetic"}},  # synthetic needs a shape
    )
    assert problems(document) == [
        "spec.template.dataset.shape: required when type is synthetic: the shape of one sample, "
        "e.g. [3, 224, 224]"
    ]


# ------------------------------------------------------------------------------------ names


def test_long_names_are_shortened_stably_and_stay_unique() -> None:
    document = sweep(
        models=[
            {"name": "m" * 40, "model": MODEL, "exports": EXPORTS},
            {"name": "m" * 39 + "n", "model": MODEL, "exports": EXPORTS},
        ],
        frameworks=["onnxruntime", "tensorflow"],
        batchSizes=[1, 1024],
    )
    document["metadata"]["name"] = "a-very-long-sweep-name-" + "x" * 40
    names = [c.name for c in expand(parse_sweep(document))]
    assert len(set(names)) == len(names) == 8
    for name in names:
        assert len(name) <= MAX_CHILD_NAME and DNS_LABEL.match(name), name
    assert names == [c.name for c in expand(parse_sweep(document))]
    short = sweep(frameworks=["tensorflow"], batchSizes=[4])
    short["metadata"]["name"] = "n" * 63
    [name] = [c.name for c in expand(parse_sweep(short))]
    assert name.endswith("-digits-tensorflow-b4"[: len(name)]) or len(name) == MAX_CHILD_NAME
    assert len(name) <= MAX_CHILD_NAME and DNS_LABEL.match(name)


def test_a_sweep_name_with_dots_still_gives_dns_labels() -> None:
    document = sweep()
    document["metadata"]["name"] = "team.a_sweep"
    [child] = expand(parse_sweep(document))
    assert child.name == "team-a-sweep-digits-onnxruntime"
    assert child.document["metadata"]["labels"][LABEL_SWEEP] == "team.a_sweep"


# ---------------------------------------------------------------------------- hostile sweeps


@pytest.mark.parametrize(("document", "expected"), HOSTILE)
def test_hostile_sweeps_are_refused_with_a_clear_message(
    document: dict[str, Any], expected: str
) -> None:
    found = problems(document)
    assert any(p.startswith(expected) for p in found), found


def test_the_cap_message_says_how_to_split() -> None:
    document = sweep(
        models=[{"name": f"m{i}", "model": MODEL} for i in range(201)],
    )
    [problem] = problems(document)
    assert "at most 200" in problem and "split" in problem


def test_the_cap_is_inclusive() -> None:
    document = sweep(
        models=[{"name": f"m{i}", "model": MODEL} for i in range(25)],
        batchSizes=[1, 2, 4, 8, 16, 32, 64, 128],
    )
    assert len(expand(parse_sweep(document))) == MAX_CHILDREN


def test_repeats_times_the_matrix_is_capped_inclusively() -> None:
    document = with_spec(sweep(batchSizes=list(range(1, 11))), repeats=20)
    assert len(expand(parse_sweep(document))) == MAX_CHILDREN
    over = with_spec(sweep(batchSizes=list(range(1, 12))), repeats=20)
    [problem] = problems(over)
    assert problem.startswith("spec.repeats:") and "split" in problem
    models = [{"name": f"m{i}", "model": MODEL} for i in range(21)]
    [problem] = problems(with_spec(sweep(models=models, batchSizes=list(range(1, 11))), repeats=2))
    assert problem.startswith("spec.matrix: the matrix has more")  # the matrix's message alone


# ------------------------------------------------------------------------------- repeats


def test_repeats_give_each_cell_its_own_children_named_and_labelled() -> None:
    document = with_spec(sweep(frameworks=["onnxruntime", "pytorch"]), repeats=3)
    children = expand(parse_sweep(document))
    cells = ["s-digits-onnxruntime", "s-digits-pytorch"]
    assert [c.name for c in children] == [f"{c}-r{r}" for r in (1, 2, 3) for c in cells]
    for child in children:
        labels = child.document["metadata"]["labels"]
        assert (labels[LABEL_CELL], labels[LABEL_REPEAT]) == (child.cell, str(child.repeat))
        assert child.name == f"{child.cell}-r{child.repeat}"
        assert DNS_LABEL.match(child.name)
    first, again = children[0], children[2]  # the same cell, repeats 1 and 2
    assert first.cell == again.cell and first.axes == again.axes
    assert first.document["spec"] == again.document["spec"]


def test_repeats_and_in_process_repetitions_combine() -> None:
    document = with_spec(
        sweep(),
        repeats=2,
        template={"dataset": {"type": "digits"}, "scenario": {"repetitions": 5}},
    )
    children = expand(parse_sweep(document))
    assert [parse_evaluation(c.document).spec.scenario.repetitions for c in children] == [5, 5]


def test_one_repeat_is_a_sweep_without_repeats() -> None:
    plain = expand(parse_sweep(full_matrix()))
    once = expand(parse_sweep(with_spec(full_matrix(), repeats=1)))
    assert [(c.name, c.document) for c in once] == [(c.name, c.document) for c in plain]
    assert all(c.cell == c.name and c.repeat is None for c in once)
    assert all(LABEL_CELL not in c.document["metadata"]["labels"] for c in once)


def test_long_repeat_names_stay_unique_and_short() -> None:
    document = with_spec(
        sweep(hardware=[{"device": "gpu", "gpuProduct": "NVIDIA-A100-SXM4-80GB-MIG-7g.80gb"}]),
        repeats=12,
    )
    document["metadata"]["name"] = "a-rather-long-sweep-name-for-repeats"
    children = expand(parse_sweep(document))
    assert len({c.name for c in children}) == 12
    assert all(len(c.name) <= MAX_CHILD_NAME and DNS_LABEL.match(c.name) for c in children)
    assert len({c.cell for c in children}) == 1


def test_wrong_kind_is_named() -> None:
    assert problems({**SWEEP, "kind": "ModelEvaluation"})[0].startswith("kind: expected")


def test_expand_refuses_what_parse_refuses() -> None:
    """The operator expands sweeps the API server admitted: the child checks run there too."""
    bad = parse_sweep(sweep())
    bad.spec.matrix.scenarios = [ScenarioType.SERVER]  # no targetQPS in the template
    assert [p.path for p in sweep_problems(bad)] == ["spec.template.scenario.targetQPS"]
    with pytest.raises(SpecValidationError, match="targetQPS") as info:
        expand(bad)
    assert str(info.value).startswith("EvaluationSweep s is not a valid EvaluationSweep")


# ------------------------------------------------------------------------- template, status


def test_template_has_every_evaluation_field_but_model_and_framework() -> None:
    """The template is a ModelEvaluation spec less the two matrix axes; a field added to
    EvaluationSpec must be added there too (with the same type). Only dataset is optional
    there: models entries may each set their own."""
    expected = {
        n: f for n, f in EvaluationSpec.model_fields.items() if n not in {"model", "framework"}
    }
    assert list(SweepTemplate.model_fields) == list(expected)
    for name, field in SweepTemplate.model_fields.items():
        theirs = expected[name]
        assert field.is_required() == (theirs.is_required() and name != "dataset"), name
        assert field.metadata == theirs.metadata, name
        if name == "dataset":
            assert field.annotation == theirs.annotation | None
        elif name not in ("scenario", "hardware"):
            assert field.annotation == theirs.annotation, name
            assert field.default == theirs.default, name


def test_status_round_trips_with_camel_case() -> None:
    status = SweepStatus.model_validate(
        {
            "phase": "Running",
            "total": 12,
            "succeeded": 7,
            "progress": "7/12 Succeeded",
            "children": [
                {"name": "s-a", "phase": "Succeeded", "p50Ms": 1.5, "p99Ms": 3.0, "top1": 0.97,
                 "batchSize": 8, "gpuProduct": "Tesla-T4", "runId": "r"},
                {"name": "s-b"},
            ],
        }
    )  # fmt: skip
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["children"][0]["p50Ms"] == 1.5
    assert dumped["children"][1] == {"name": "s-b", "message": ""}
    with pytest.raises(ValueError):
        SweepStatus.model_validate({"phase": "Done"})


# ---------------------------------------------------------------------------- examples, CLI


@pytest.mark.parametrize(
    "example", RESOURCE_EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples"))
)
def test_every_example_validates(example: Path) -> None:
    """Each example on its own, its modelRefs resolved against the catalog (as
    `mlms validate EXAMPLE --models examples/catalog/` does)."""
    checked, unusable = check_files([example], [CATALOG] if CATALOG.is_dir() else [])
    assert checked and unusable == []
    assert [str(c.error) for c in checked if c.error] == []


def test_sweep_examples() -> None:
    frameworks = expand(
        parse_sweep(yaml.safe_load((ROOT / "examples/sweeps/digits-frameworks.yaml").read_text()))
    )
    assert [c.name for c in frameworks] == [
        f"digits-frameworks-digits-{f}-b{b}"
        for f in ("onnxruntime", "pytorch", "tensorflow")
        for b in (1, 8)
    ]
    cluster = next(yaml.safe_load_all((ROOT / "examples/cluster/digits-compare.yaml").read_text()))
    assert {c.document["spec"]["model"]["uri"] for c in frameworks} == {
        d["spec"]["model"]["uri"]
        for d in yaml.safe_load_all((ROOT / "examples/cluster/digits-compare.yaml").read_text())
    }
    assert cluster["spec"]["model"]["inputs"] == frameworks[0].document["spec"]["model"]["inputs"]
    pitfalls = expand(
        parse_sweep(yaml.safe_load((ROOT / "examples/sweeps/digits-pitfalls.yaml").read_text()))
    )
    assert {c.document["spec"]["model"]["uri"] for c in pitfalls} == {
        "pvc://mlmodelscope-examples/digits.onnx"
    }
    assert len({str(c.document["spec"]["preprocessing"]) for c in pitfalls}) == len(pitfalls) == 4


def test_the_repeats_example_runs_each_cell_in_three_children() -> None:
    """examples/sweeps/repeats.yaml: the names and the order its comment gives."""
    example = yaml.safe_load((ROOT / "examples/sweeps/repeats.yaml").read_text())
    children = expand(parse_sweep(example))
    assert [c.name for c in children] == [
        f"repeats-digits-{f}-r{r}" for r in (1, 2, 3) for f in ("onnxruntime", "pytorch")
    ]
    assert [c.document["metadata"]["labels"][LABEL_CELL] for c in children[1::2]] == [
        "repeats-digits-pytorch"
    ] * 3


def test_validate_reports_each_document_of_a_mixed_file(tmp_path: Path) -> None:
    evaluation = (ROOT / "examples" / "digits-offline.yaml").read_text()
    good = yaml.safe_dump(sweep())
    bad = yaml.safe_dump(sweep(models=[]))
    file = tmp_path / "mixed.yaml"
    file.write_text("\n---\n".join([evaluation, good, bad]))
    result = CliRunner().invoke(app, ["validate", str(file)])
    assert result.exit_code == 1
    output = result.output
    assert "(document 2, s): 1 ModelEvaluations" in output
    assert "(document 3, s) is not a valid EvaluationSweep" in output
    assert "spec.matrix.models: an empty axis" in output
    assert "document 1" in output
    ok = tmp_path / "ok.yaml"
    ok.write_text("\n---\n".join([evaluation, good]))
    assert CliRunner().invoke(app, ["validate", str(ok)]).exit_code == 0


def test_the_spec_doc_sweep_example_validates() -> None:
    """The EvaluationSweep in docs/spec.md expands as the doc says (tests/packaging/test_docs.py
    validates every yaml block of either kind)."""
    text = (ROOT / "docs" / "spec.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
        if "kind: EvaluationSweep" in b
    ]
    assert blocks
    for block in blocks:
        children = expand(parse_sweep(yaml.safe_load(block)))
        assert [c.name for c in children][:2] == [
            "digits-frameworks-digits-onnxruntime-b1",
            "digits-frameworks-digits-onnxruntime-b8",
        ]


def test_descriptions_state_the_cap_that_is_enforced() -> None:
    from mlmodelscope.spec.sweep import SweepMatrix, SweepSpec

    for description in (SweepSpec.model_fields["matrix"].description, SweepMatrix.__doc__):
        assert f"At most {MAX_CHILDREN} combinations" in " ".join(str(description).split())
