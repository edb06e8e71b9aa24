"""The CI examples (examples/ci): a GitHub Actions workflow and an Argo WorkflowTemplate that
run a ModelEvaluation in a cluster, wait for it and `mlms gate` it. Neither actionlint nor
Argo's schema is at hand offline, so the files are checked for their structure and against
this project: every `mlms` command line parses with the real CLI, every condition and phase
waited on is one the operator sets, the evaluation validates, and the names they read (the
results ConfigMap and its key) are the operator's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml

import mlmodelscope
from mlmodelscope.cli import app as mlms_app
from mlmodelscope.contract.wire import RESULT_KEY
from mlmodelscope.controller.names import results_configmap_name
from mlmodelscope.controller.status import ConditionType
from mlmodelscope.report.gate import GateStatus
from mlmodelscope.spec import SpecValidationError
from mlmodelscope.spec.document import parse_evaluation
from mlmodelscope.spec.status import Phase

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"
GITHUB = CI / "github-actions-gate.yaml"
ARGO = CI / "argo-gate-workflow.yaml"
EVALUATION = CI / "evaluation.yaml"

WORKFLOW: dict[Any, Any] = yaml.safe_load(GITHUB.read_text())
TEMPLATE: dict[str, Any] = yaml.safe_load(ARGO.read_text())
CONDITIONS = {v for k, v in vars(ConditionType).items() if k.isupper()}
JSONPATH = "{.data." + RESULT_KEY.replace(".", "\\.") + "}"
"""The results ConfigMap's result document, as a kubectl JSONPath (the dot escaped)."""
ARGO_TAG = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")


def steps() -> list[dict[str, Any]]:
    return [step for job in WORKFLOW["jobs"].values() for step in job["steps"]]


def argo_templates() -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in TEMPLATE["spec"]["templates"]}


def argo_resource(action: str) -> dict[str, Any]:
    """The one resource template with this action."""
    (template,) = [
        t for t in argo_templates().values() if t.get("resource", {}).get("action") == action
    ]
    return template


def scripts() -> list[tuple[str, str]]:
    """(where, shell script) of every `run:` step and every container's `sh -c` argument."""
    found = [
        (f"{GITHUB.name}: {s.get('name', s.get('uses'))}", s["run"]) for s in steps() if "run" in s
    ]
    for name, template in argo_templates().items():
        container = template.get("container")
        if container and container.get("command") == ["sh", "-c"]:
            found += [(f"{ARGO.name}: {name}", arg) for arg in container["args"]]
    return found


def command_lines(script: str, program: str) -> list[list[str]]:
    """Each call of `program` in a shell script, as its words (continuations joined, each
    command ended at `||`, `&&`, `;`, `|`, `&` or a comment)."""
    lines = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for start in [i for i, word in enumerate(words) if word == program]:
            rest = words[start + 1 :]
            ends = [i for i, word in enumerate(rest) if word in ("||", "&&", ";", "|", "&")]
            lines.append(rest[: ends[0]] if ends else rest)
    return lines


def mlms_calls() -> list[tuple[str, list[str]]]:
    return [
        (where, words) for where, script in scripts() for words in command_lines(script, "mlms")
    ]


def test_the_examples_call_mlms_gate() -> None:
    """The scan finds what it must: guards against a parser that finds nothing."""
    calls = mlms_calls()
    assert {where.split(":")[0] for where, _ in calls} == {GITHUB.name, ARGO.name}
    assert all(words[0] == "gate" for _, words in calls), calls


@pytest.mark.parametrize("where, words", mlms_calls(), ids=lambda v: str(v)[:40])
def test_every_mlms_call_parses(where: str, words: list[str]) -> None:
    """Each `mlms <command> ...` names a command and options that exist, with the arguments
    it takes (shell variables stand for values): Click parses the line without running it."""
    group: Any = typer.main.get_command(mlms_app)
    command = group.commands.get(words[0])
    assert command is not None, f"{where}: no command `mlms {words[0]}`"
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    options = [w.split("=")[0] for w in words[1:] if w.startswith("-")]
    assert not set(options) - known, f"{where}: `mlms {words[0]}` has no {set(options) - known}"
    args = [re.sub(r"\$\{?\w+\}?", "value", w) for w in words[1:]]
    try:
        command.make_context(f"mlms {words[0]}", args)
    except click.ClickException as exc:
        pytest.fail(f"{where}: {exc.format_message()}")


@pytest.mark.parametrize("where, script", [s for s in scripts() if "mlms gate" in s[1]])
def test_gate_reports_and_exit_status_are_kept(where: str, script: str) -> None:
    """The gate writes JUnit and Markdown, shows the Markdown, and its exit status (0 pass,
    1 regression, 2 not comparable) is the step's."""
    (words,) = command_lines(script, "mlms")
    assert "--junit" in words and "--markdown" in words
    markdown = words[words.index("--markdown") + 1]
    assert f"cat {markdown}" in script
    assert "|| status=$?" in script and script.rstrip().endswith("exit $status")
    assert [s.value for s in GateStatus] == [0, 1, 2]


def kubectl_calls() -> list[list[str]]:
    return [words for _, script in scripts() for words in command_lines(script, "kubectl")]


def test_kubectl_waits_for_conditions_the_operator_sets() -> None:
    waits = [w for w in kubectl_calls() if w[0] == "wait"]
    assert waits
    for words in waits:
        (wanted,) = [w.removeprefix("--for=condition=") for w in words if w.startswith("--for=")]
        assert wanted.split("=")[0] in CONDITIONS, f"the operator sets no condition {wanted}"
        assert any(w.startswith("--timeout=") for w in words)


def test_github_workflow_structure() -> None:
    on: Any = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in on
    assert WORKFLOW["jobs"]
    for job in WORKFLOW["jobs"].values():
        assert job["runs-on"] and job["steps"]
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), step
    uses = [s["uses"].split("@")[0] for s in steps() if "uses" in s]
    assert uses[0] == "actions/checkout"
    assert "actions/upload-artifact" in uses
    text = GITHUB.read_text()
    assert "secrets.KUBECONFIG" in text and "KUBECONFIG=" in text
    assert '>> "$GITHUB_STEP_SUMMARY"' in text


def test_github_workflow_applies_the_evaluation_and_reads_its_result() -> None:
    """It applies examples/ci/evaluation.yaml, and reads `result.json` of the ConfigMap the
    operator names `<name>-results`."""
    env = WORKFLOW["env"]
    assert ROOT / env["EVALUATION"] == EVALUATION
    calls = kubectl_calls()
    assert ["apply", "-n", "$NAMESPACE", "-f", "$EVALUATION"] in calls
    (document,) = yaml.safe_load_all(EVALUATION.read_text())
    assert env["NAME"] == document["metadata"]["name"]
    assert results_configmap_name(env["NAME"]) == f"{env['NAME']}-results"
    (get,) = [w for w in calls if w[:2] == ["get", "configmap"]]
    assert "$NAME-results" in get
    assert "-o" in get and get[get.index("-o") + 1] == f"jsonpath={JSONPATH}"


def test_the_install_is_pinned_to_this_version() -> None:
    """The examples install the release this repository builds (with scipy, for the top-1
    verdict), not whatever is newest."""
    (install,) = [s["run"] for s in steps() if "pip install" in s.get("run", "")]
    assert f"mlmodelscope=={mlmodelscope.__version__}" in install and "scipy" in install
    image = {p["name"]: p.get("value") for p in TEMPLATE["spec"]["arguments"]["parameters"]}
    assert image["image"].endswith(f":{mlmodelscope.__version__}-cpu")


def test_the_evaluation_validates() -> None:
    (document,) = yaml.safe_load_all(EVALUATION.read_text())
    try:
        parse_evaluation(document, source=str(EVALUATION))
    except SpecValidationError as exc:
        pytest.fail(str(exc))


# ---------------------------------------------------------------------------------- Argo


def test_argo_template_structure() -> None:
    """A WorkflowTemplate whose entrypoint and every step name templates it has, and whose
    `{{...}}` references are declared."""
    assert TEMPLATE["apiVersion"] == "argoproj.io/v1alpha1"
    assert TEMPLATE["kind"] == "WorkflowTemplate"
    templates = argo_templates()
    assert TEMPLATE["spec"]["entrypoint"] in templates
    workflow_parameters = {p["name"] for p in TEMPLATE["spec"]["arguments"]["parameters"]}
    step_names: dict[str, str] = {}
    for template in templates.values():
        kinds = {"steps", "dag", "container", "script", "resource"} & set(template)
        assert len(kinds) == 1, f"{template['name']}: {kinds}"
        for group in template.get("steps", []):
            for step in group:
                assert step["template"] in templates, step
                step_names[step["name"]] = step["template"]
    for name, template in templates.items():
        inputs = {p["name"] for p in template.get("inputs", {}).get("parameters", [])}
        for tag in ARGO_TAG.findall(yaml.safe_dump(template)):
            parts = tag.split(".")
            if parts[0] == "workflow" and parts[1] == "parameters":
                assert parts[2] in workflow_parameters, f"{name}: {tag}"
            elif parts[0] == "inputs":
                assert parts[2] in inputs, f"{name}: {tag}"
            elif parts[0] == "steps":
                outputs = templates[step_names[parts[1]]]["outputs"]["parameters"]
                assert parts[4] in {p["name"] for p in outputs}, f"{name}: {tag}"
            else:
                assert tag == "workflow.name", f"{name}: {tag}"


def test_argo_waits_on_the_evaluations_phases() -> None:
    """successCondition and failureCondition read `.status.phase`, compared with the phases
    of spec/status.py: Succeeded and Failed."""
    evaluate = argo_resource("apply")["resource"]
    for key, phase in (("successCondition", Phase.SUCCEEDED), ("failureCondition", Phase.FAILED)):
        match = re.fullmatch(r"status\.phase\s*==\s*(\w+)", evaluate[key])
        assert match, evaluate[key]
        assert match[1] in {p.value for p in Phase}
        assert match[1] == phase.value


def test_argo_evaluation_validates_and_matches_the_github_one() -> None:
    """The manifest it applies is examples/ci/evaluation.yaml's spec under the workflow's name."""
    evaluate = argo_resource("apply")["resource"]
    document = yaml.safe_load(evaluate["manifest"].replace("{{workflow.name}}", "mlms-gate-x7k2p"))
    try:
        parse_evaluation(document, source=f"{ARGO.name}: evaluate")
    except SpecValidationError as exc:
        pytest.fail(str(exc))
    (reference,) = yaml.safe_load_all(EVALUATION.read_text())
    assert document["spec"] == reference["spec"]
    assert evaluate.get("setOwnerReference") is True


def test_argo_reads_the_result_document() -> None:
    """The `get` step reads `result.json` of the ConfigMap the operator names `<name>-results`."""
    fetch = argo_resource("get")
    manifest = yaml.safe_load(fetch["resource"]["manifest"])
    assert manifest["kind"] == "ConfigMap"
    assert manifest["metadata"]["name"] == "{{workflow.name}}-results"
    assert results_configmap_name("mlms-gate-x7k2p") == "mlms-gate-x7k2p-results"
    (output,) = fetch["outputs"]["parameters"]
    assert output["valueFrom"]["jsonPath"] == JSONPATH
