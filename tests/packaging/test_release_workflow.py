"""The release workflow (.github/workflows/release.yml), which no test can run for real (it
pushes to a registry and signs with GitHub's OIDC identity): linted by actionlint (built from its
pinned Go module), held to the bake file and to least privilege, its digest pinning checked on
bake metadata (the pinned chart passes `helm lint` and renders every image by digest), and every
one of its scripts run dry, job after job, with stand-ins for docker, cosign, helm push and gh.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, one, run_helm
from workflow_runner import (
    DryRun,
    StepError,
    bake_metadata,
    fake_digest,
    resolve_tags,
    stub_calls,
    write_stubs,
)

from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.devtools import actionlint as actionlint_tool
from mlmodelscope.devtools import release
from mlmodelscope.devtools.helm import HELM_VERSION

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_FILE = ROOT / ".github" / "workflows" / "release.yml"
WORKFLOW_TEXT = WORKFLOW_FILE.read_text()
WORKFLOW: dict[Any, Any] = yaml.safe_load(WORKFLOW_TEXT)  # the key `on` reads as True
BAKE_FILE = ROOT / "images" / "docker-bake.json"
BAKE: dict[str, Any] = json.loads(BAKE_FILE.read_text())
TARGETS = release.release_targets(BAKE)
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
REGISTRY = "ghcr.io/mlmodelscope"
BAKE_ENV = {"REGISTRY": REGISTRY, "VERSION": VERSION}


def step(job: str, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        s for s in WORKFLOW["jobs"][job]["steps"] if s.get("name") == name
    ]
    assert len(found) == 1, f"{job}: one step named {name!r}"
    return found[0]


def action_steps(job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in WORKFLOW["jobs"][job]["steps"] if s.get("uses", "").startswith(action)]


@pytest.fixture(scope="session")
def actionlint() -> Path:
    """actionlint, compiled from its Go module into the tool cache on first use."""
    if shutil.which("go") is None and not actionlint_tool.is_built():
        pytest.skip(f"building actionlint {actionlint_tool.ACTIONLINT_VERSION} needs Go >= 1.25")
    return actionlint_tool.ensure_actionlint()


def lint(actionlint: Path, workflow: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(actionlint), "-no-color", "-verbose", str(workflow)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- lint ---------------------------------------------------------------------------------


def test_actionlint_finds_nothing(actionlint: Path) -> None:
    """Syntax, expressions and their types, job needs and outputs, the inputs of the actions it
    knows, runner labels; and, when a `shellcheck` is on PATH, every `run:` script."""
    proc = lint(actionlint, WORKFLOW_FILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shellcheck_used = shutil.which("shellcheck") is not None
    assert ('Rule "shellcheck" was disabled' not in proc.stderr) == shellcheck_used, proc.stderr


def test_actionlint_is_not_silent(actionlint: Path, tmp_path: Path) -> None:
    """The same linter fails a copy with a typo in an expression and a bad permission."""
    broken = WORKFLOW_TEXT.replace("matrix.target }}", "matrix.targte }}", 1)
    broken = broken.replace("id-token: write", "id-token: writ", 1)
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    copy = tmp_path / ".github" / "workflows" / "release.yml"
    copy.write_text(broken)
    proc = lint(actionlint, copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "targte" in proc.stdout and "writ" in proc.stdout, proc.stdout


# ---- what the workflow says -----------------------------------------------------------------


def test_release_runs_on_version_tags_only() -> None:
    triggers = WORKFLOW.get("on", WORKFLOW.get(True))
    assert triggers == {"push": {"tags": ["v*"]}}
    assert WORKFLOW["defaults"]["run"]["shell"] == "bash"  # -eo pipefail, as the dry run


def test_each_job_has_only_the_permissions_it_uses() -> None:
    """Nothing by default; only the publishing job may mint an OIDC token (cosign keyless),
    only the last may write the repository (the GitHub release)."""
    assert WORKFLOW["permissions"] == {}
    want = {
        "plan": {"contents": "read"},
        "images": {"contents": "read", "packages": "write"},
        "publish": {"contents": "read", "packages": "write", "id-token": "write"},
        "release": {"contents": "write"},
    }
    assert {name: job.get("permissions") for name, job in WORKFLOW["jobs"].items()} == want
    for job in WORKFLOW["jobs"].values():
        for checkout in [
            s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")
        ]:
            assert checkout["with"]["persist-credentials"] is False


def test_every_action_is_pinned_by_commit() -> None:
    """Full 40-hex commit SHAs, each with the release it is, never a movable tag."""
    uses = re.findall(r"^\s*(?:- )?uses: (.+)$", WORKFLOW_TEXT, flags=re.M)
    assert len(uses) >= 8
    pinned = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+( .*)?")
    assert [u for u in uses if not pinned.fullmatch(u)] == []


def test_workflow_builds_every_bake_target_as_the_bake_file_says() -> None:
    """The matrix is the bake file's default group, each target built by bake itself (its
    platforms: the GPU agents amd64 only), with SBOM and max-mode provenance, pushed."""
    matrix = WORKFLOW["jobs"]["images"]["strategy"]["matrix"]["target"]
    assert matrix == sorted(matrix)
    assert sorted(TARGETS) == matrix
    build = step("images", "Build and push, with SBOM and provenance")["run"]
    for part in (
        "docker buildx bake --file images/docker-bake.json",
        '--set "*.attest=type=sbom"',
        '--set "*.attest=type=provenance,mode=max"',
        '--metadata-file "bake-metadata-$TARGET.json"',
        '--push "$TARGET"',
    ):
        assert part in build
    assert "platform" not in build  # the bake file's platforms, not an override
    assert set(BAKE["variable"]) <= set(WORKFLOW["jobs"]["images"]["env"])
    for target in TARGETS:
        platforms = BAKE["target"][target]["platforms"]
        assert platforms and set(platforms) <= {"linux/amd64", "linux/arm64"}, target
        if target.endswith("-gpu"):
            assert platforms == ["linux/amd64"], target
    if any("linux/arm64" in BAKE["target"][t]["platforms"] for t in TARGETS):
        assert action_steps("images", "docker/setup-qemu-action")
    pin = step("publish", "Pin the digests into the chart")["run"]
    assert "--bake images/docker-bake.json" in pin  # the pin refuses a missing target


def test_workflow_helm_is_the_tested_helm() -> None:
    (setup,) = action_steps("publish", "azure/setup-helm")
    assert setup["with"]["version"] == HELM_VERSION


# ---- the pinning, as functions ------------------------------------------------------------


def test_read_metadata_reads_what_bake_writes() -> None:
    """One metadata file for the whole group or one per target read the same."""
    whole = release.read_metadata([bake_metadata(BAKE, TARGETS, BAKE_ENV)])
    per_target = release.read_metadata([bake_metadata(BAKE, [t], BAKE_ENV) for t in TARGETS])
    assert whole == per_target
    assert sorted(whole) == sorted(TARGETS)
    for target, image in whole.items():
        (tag,) = resolve_tags(BAKE, target, BAKE_ENV)
        assert f"{image.repository}:{image.tag}" == tag
        assert image.digest == fake_digest(target, tag)
    release.complete(whole, TARGETS)


def test_read_metadata_refuses_what_was_not_pushed() -> None:
    doc = bake_metadata(BAKE, ["operator"], BAKE_ENV)
    del doc["operator"]["containerimage.digest"]
    with pytest.raises(release.ReleaseError, match="operator: no pushed digest"):
        release.read_metadata([doc])
    one, other = (bake_metadata(BAKE, ["operator"], BAKE_ENV) for _ in range(2))
    other["operator"]["containerimage.digest"] = fake_digest("another build")
    with pytest.raises(release.ReleaseError, match="two results"):
        release.read_metadata([one, other])
    images = release.read_metadata([one])
    with pytest.raises(release.ReleaseError, match="lacks"):
        release.complete(images, TARGETS)


def test_every_release_target_has_a_place_in_the_values() -> None:
    images = release.read_metadata([bake_metadata(BAKE, TARGETS, BAKE_ENV)])
    pins = release.value_pins(images)
    assert len(pins) == sum(3 if t in release.IMAGE_VALUES else 1 for t in TARGETS)
    stray = release.PushedImage("jupyter", f"{REGISTRY}/jupyter", VERSION, fake_digest("j"))
    with pytest.raises(release.ReleaseError, match="'jupyter' has no place"):
        release.value_pins({"jupyter": stray})


SAMPLE_VALUES = """\
# -- A comment the packaged chart keeps.
image:
  # -- Repository.
  repository: example.org/op   # trailing comment kept
  tag: ""
  notes: |
    digest: "in a block scalar, not a key"
  digest: ""
list:
  - digest: "an item's key, not image.digest"
operator:
  images:
    pytorch:
      cpu: ""
"""


def test_set_scalars_changes_only_the_pinned_lines() -> None:
    pins = {
        ("image", "repository"): "ghcr.io/x/operator",
        ("image", "digest"): fake_digest("op"),
        ("operator", "images", "pytorch", "cpu"): "ghcr.io/x/agent:1@" + fake_digest("a"),
    }
    out = release.set_scalars(SAMPLE_VALUES, pins)
    changed = [
        line
        for line in difflib.ndiff(SAMPLE_VALUES.splitlines(), out.splitlines())
        if line.startswith("+ ")
    ]
    assert changed == [
        '+   repository: "ghcr.io/x/operator"   # trailing comment kept',
        f'+   digest: "{fake_digest("op")}"',
        f'+       cpu: "ghcr.io/x/agent:1@{fake_digest("a")}"',
    ]
    loaded = yaml.safe_load(out)
    assert loaded["image"]["notes"] == 'digest: "in a block scalar, not a key"\n'
    assert loaded["list"] == [{"digest": "an item's key, not image.digest"}]
    with pytest.raises(release.ReleaseError, match=r"no \['image.missing'\]"):
        release.set_scalars(SAMPLE_VALUES, {("image", "missing"): "x"})
    with pytest.raises(release.ReleaseError, match=r"image\.notes is not a plain scalar"):
        release.set_scalars(SAMPLE_VALUES, {("image", "notes"): "x"})
    with pytest.raises(release.ReleaseError, match=r"image\.tag is in values.yaml twice"):
        release.set_scalars(SAMPLE_VALUES + 'image:\n  tag: ""\n', {("image", "tag"): "1"})


def test_release_module_needs_only_pyyaml() -> None:
    """The workflow runs it in a venv with PyYAML alone: beyond what `import yaml` loads, it
    imports only the standard library and its own package."""
    code = (
        "import sys, yaml; before = set(sys.modules); import mlmodelscope.devtools.release; "
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT / "operator")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(set(proc.stdout.split()) - set(sys.stdlib_module_names)) == ["mlmodelscope"]


def test_parse_helm_push_reads_the_chart_digest() -> None:
    digest = fake_digest("chart")
    out = f"Pushed: {REGISTRY}/charts/mlmodelscope:{VERSION}\nDigest: {digest}\n"
    assert release.parse_helm_push(out) == f"{REGISTRY}/charts/mlmodelscope@{digest}"
    with pytest.raises(release.ReleaseError, match="no 'Pushed:'"):
        release.parse_helm_push("Error: unauthorized\n")


# ---- the pinned chart ---------------------------------------------------------------------


def render_all(helm: Path, chart: Path, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "mlms", str(chart), "--namespace", "mlmodelscope-system"]
    for item in sets:
        args += ["--set", item]
    return [m for m in yaml.safe_load_all(run_helm(helm, *args).stdout) if m]


EVERY_IMAGE = (
    "postgresql.enabled=true",
    "server.enabled=true",
    "server.auth.existingSecret=results-tokens",
)
"""Values under which the chart deploys every image it has (operator, server, PostgreSQL)."""


def test_pinned_chart_references_every_image_by_digest(helm: Path, tmp_path: Path) -> None:
    """`pin` on a sample bake metadata file: values.yaml changes in the pinned lines only, the
    chart passes `helm lint --strict`, renders every container and every agent image of the
    operator's settings by digest, and `helm package` carries those values with their
    comments."""
    metadata = tmp_path / "bake-metadata.json"
    metadata.write_text(json.dumps(bake_metadata(BAKE, TARGETS, BAKE_ENV), indent=2))
    chart = tmp_path / "chart" / "mlmodelscope"
    shutil.copytree(CHART, chart)
    digests = tmp_path / "digests.json"
    argv = ["pin", "--bake", str(BAKE_FILE), "--values", str(chart / "values.yaml")]
    assert release.main([*argv, "--digests", str(digests), str(metadata)]) == 0

    images = release.from_record(json.loads(digests.read_text()))
    original = (CHART / "values.yaml").read_text().splitlines()
    pinned_text = (chart / "values.yaml").read_text()
    changed = [d for d in difflib.ndiff(original, pinned_text.splitlines()) if d[:2] == "+ "]
    assert len(changed) == len(release.value_pins(images))

    run_helm(helm, "lint", "--strict", str(chart))
    defaults = release.image_references(render_all(helm, chart)).values()
    assert [ref for ref in defaults if not release.BY_DIGEST.fullmatch(ref)] == []
    manifests = render_all(helm, chart, *EVERY_IMAGE)
    assert release.unpinned(manifests, images) == []
    refs = release.image_references(manifests)
    assert images["operator"].by_digest in refs.values()
    config = one(manifests, "ConfigMap", "mlms-mlmodelscope-operator")
    settings = OperatorSettings.from_env(config["data"])
    agents = {i.reference for t, i in images.items() if t.startswith("agent-")}
    assert set(settings.agent_images()) == agents

    run_helm(helm, "package", str(chart), "--destination", str(tmp_path))
    with tarfile.open(tmp_path / f"mlmodelscope-{VERSION}.tgz") as tgz:
        member = tgz.extractfile("mlmodelscope/values.yaml")
        assert member is not None
        assert member.read().decode() == pinned_text


def test_check_fails_a_chart_that_pulls_by_tag(helm: Path, tmp_path: Path) -> None:
    images = release.read_metadata([bake_metadata(BAKE, TARGETS, BAKE_ENV)])
    manifests = render_all(helm, CHART, *EVERY_IMAGE)
    problems = release.unpinned(manifests, images)
    assert any("containers/operator" in p and "not by digest" in p for p in problems)
    assert any(p.startswith("agent-pytorch-gpu: the chart does not name") for p in problems)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(manifests))
    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps(release.record(images)))
    assert release.main(["check", "--digests", str(digests), str(rendered)]) == 1


# ---- the dry run ----------------------------------------------------------------------------

EXPRESSIONS = {
    "github.ref_name": f"v{VERSION}",
    "github.repository_owner": "MLModelScope",  # ghcr.io wants it in lower case
    "github.repository": "MLModelScope/mlmodelscope",
    "github.actor": "release-bot",
    "github.token": "token-for-gh",
    "vars.RELEASE_REGISTRY": "",
    "vars.RELEASE_REGISTRY && secrets.RELEASE_REGISTRY_USERNAME || github.actor": "release-bot",
    "vars.RELEASE_REGISTRY && secrets.RELEASE_REGISTRY_PASSWORD || secrets.GITHUB_TOKEN": (
        "token-for-registry"
    ),
}
"""What GitHub would put in the workflow's expressions for a push of the tag v<version>, by
the expression (the dry run evaluates none itself), with RELEASE_REGISTRY unset."""

NOT_RUN = {
    "images": {"Make room for the CUDA images": "deletes the runner's preinstalled toolchains"},
    "publish": {
        "Python with PyYAML for the release scripts": "installs from PyPI; the dry run's PATH "
        "has this test's Python, which has PyYAML",
    },
}


@pytest.fixture
def dry_run(helm: Path, tmp_path: Path) -> DryRun:
    """A workspace like the runner's checkout (the repository's folders, linked), stand-ins
    first on PATH, then this test's Python (`python`, with PyYAML)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in (".git", "operator", "images", "helm", "constraints.txt", "pyproject.toml"):
        (workspace / name).symlink_to(ROOT / name)
    stubs = write_stubs(tmp_path / "stubs")
    return DryRun(
        WORKFLOW,
        workspace,
        tmp_path / "runner",
        [stubs, Path(sys.executable).parent],
        dict(EXPRESSIONS),
        env={
            "STUB_LOG": str(tmp_path / "calls.jsonl"),
            "STUB_HELPERS": str(Path(__file__).parent),
            "REAL_HELM": str(helm),
        },
    )


def test_plan_refuses_a_tag_that_is_not_the_package_version(dry_run: DryRun) -> None:
    step = ["Version, revision and registry"]
    with pytest.raises(StepError, match="is not v<SemVer>"):
        dry_run.run_job("plan", run=step, not_run={}, context={"github.ref_name": "v1.2"})
    with pytest.raises(StepError, match=f"pyproject.toml says version {VERSION}"):
        dry_run.run_job("plan", run=step, not_run={}, context={"github.ref_name": "v99.0.0"})


def test_release_runs_dry(dry_run: DryRun) -> None:
    """plan → images (each target) → publish → release: the bake invocations, the pinned,
    checked and packaged chart, a signature for every image and the chart by digest, the
    recorded digests, the summary, and the GitHub release with its assets."""
    calls_log = Path(dry_run.env["STUB_LOG"])
    plan = dry_run.run_job("plan", run=["Version, revision and registry"], not_run={})
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert plan.outputs == {
        "registry": REGISTRY,
        "version": VERSION,
        "revision": revision,
        "created": plan.outputs["created"],
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", plan.outputs["created"])
    needs = {f"needs.plan.outputs.{key}": value for key, value in plan.outputs.items()}

    for target in WORKFLOW["jobs"]["images"]["strategy"]["matrix"]["target"]:
        dry_run.run_job(
            "images",
            run=["Log in to the registry", "Build and push, with SBOM and provenance"],
            not_run=NOT_RUN["images"],
            context={**needs, "matrix.target": target},
        )
    bakes = [c for c in stub_calls(calls_log, "docker") if c["argv"][:2] == ["buildx", "bake"]]
    assert [c["argv"][-1] for c in bakes] == sorted(TARGETS)
    for call in bakes:
        assert call["env"] == {
            "REGISTRY": REGISTRY,
            "VERSION": VERSION,
            "REVISION": revision,
            "CREATED": plan.outputs["created"],
        }
        sets = [call["argv"][i + 1] for i, a in enumerate(call["argv"]) if a == "--set"]
        assert sets == ["*.attest=type=sbom", "*.attest=type=provenance,mode=max"]
    logins = [c for c in stub_calls(calls_log, "docker") if c["argv"][0] == "login"]
    assert {(tuple(c["argv"]), c["stdin"]) for c in logins} == {
        (
            ("login", "ghcr.io", "--username", "release-bot", "--password-stdin"),
            "token-for-registry",
        )
    }

    # download-artifact: every job's metadata file into release/metadata
    metadata = dry_run.workspace / "release" / "metadata"
    metadata.mkdir(parents=True)
    for path in dry_run.workspace.glob("bake-metadata-*.json"):
        shutil.copy(path, metadata)
    publish = dry_run.run_job(
        "publish",
        run=[
            "Log in to the registry",
            "Pin the digests into the chart",
            "Check the pinned chart",
            "Sign the images",
            "Package and push the chart",
            "Sign the chart and record the digests",
        ],
        not_run=NOT_RUN["publish"],
        context=needs,
    )
    out = dry_run.workspace / "release"
    chart_file = out / f"mlmodelscope-{VERSION}.tgz"
    chart = f"{REGISTRY}/charts/mlmodelscope@{fake_digest_of(chart_file)}"
    recorded = json.loads((out / "release-digests.json").read_text())
    assert recorded["chart"] == chart
    images = release.from_record(recorded)
    assert sorted(images) == sorted(TARGETS)
    signed = [c["argv"] for c in stub_calls(calls_log, "cosign")]
    assert signed == [
        *(["sign", "--yes", images[t].by_digest] for t in sorted(TARGETS)),
        ["sign", "--yes", chart],
    ]
    (push,) = [c["argv"] for c in stub_calls(calls_log, "helm") if c["argv"][0] == "push"]
    assert push == ["push", f"release/mlmodelscope-{VERSION}.tgz", f"oci://{REGISTRY}/charts"]
    (helm_login,) = [c for c in stub_calls(calls_log, "helm") if c["argv"][0] == "registry"]
    assert helm_login["stdin"] == "token-for-registry"
    with tarfile.open(chart_file) as tgz:
        member = tgz.extractfile("mlmodelscope/values.yaml")
        assert member is not None
        values = yaml.safe_load(member)
    assert values["image"]["digest"] == images["operator"].digest
    assert values["operator"]["images"]["onnxruntime"]["gpu"] == (
        images["agent-onnxruntime-gpu"].reference
    )
    assert chart in publish.summary
    assert all(image.digest in publish.summary for image in images.values())

    dry_run.run_job("release", run=["Create the release"], not_run={})
    (gh,) = [c["argv"] for c in stub_calls(calls_log, "gh")]
    assert gh[:3] == ["release", "create", f"v{VERSION}"]
    assert "--verify-tag" in gh and gh[gh.index("--repo") + 1] == "MLModelScope/mlmodelscope"
    assert gh[-2:] == ["release/release-digests.json", f"release/mlmodelscope-{VERSION}.tgz"]


def fake_digest_of(path: Path) -> str:
    """The digest the helm stand-in reports for a pushed chart (the package's sha256)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the docs -----------------------------------------------------------------------------

INSTALL_DOC = (ROOT / "docs" / "install.md").read_text()


def test_install_doc_verifies_the_workflows_identity() -> None:
    """The doc's identity regexp accepts the certificate a tag's run gets (the workflow file
    at the tag) and nothing else; its chart URL is where the workflow pushes the chart."""
    (identity,) = re.findall(r"^IDENTITY='(.+)'$", INSTALL_DOC, flags=re.M)
    repository = yaml.safe_load((CHART / "Chart.yaml").read_text())["home"]
    workflow = WORKFLOW_FILE.relative_to(ROOT).as_posix()
    san = f"{repository}/{workflow}@refs/tags/v{VERSION}"
    assert re.match(identity, san)
    assert f"{repository}/{workflow}@refs/tags/v0.2.0" in INSTALL_DOC  # the doc's example
    for other in (
        f"{repository}/{workflow}@refs/heads/main",
        f"{repository}/.github/workflows/ci.yml@refs/tags/v{VERSION}",
        f"{repository}-fork/{workflow}@refs/tags/v{VERSION}",
    ):
        assert not re.match(identity, other), other
    assert "ISSUER=https://token.actions.githubusercontent.com" in INSTALL_DOC
    push = step("publish", "Package and push the chart")["run"]
    assert '"oci://$REGISTRY/charts"' in push
    chart_name = yaml.safe_load((CHART / "Chart.yaml").read_text())["name"]
    assert f"oci://{REGISTRY}/charts/{chart_name} --version" in INSTALL_DOC


def test_install_doc_says_what_the_bake_file_builds_where() -> None:
    multi = sorted(t for t in TARGETS if "linux/arm64" in BAKE["target"][t]["platforms"])
    agents = [t for t in TARGETS if t.startswith("agent-")]
    assert multi == ["operator", "postgresql"]
    assert all(BAKE["target"][t]["platforms"] == ["linux/amd64"] for t in agents)
    assert len(agents) == 6 and len(TARGETS) == 8
    claim = (
        "the operator and PostgreSQL images linux/amd64 and linux/arm64, "
        "the six agent images linux/amd64"
    )
    assert claim in " ".join(INSTALL_DOC.split())
