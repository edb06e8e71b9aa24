"""The CPU images, built by a real Docker engine and run for real.

``python -m mlmodelscope.devtools.images build`` (hack/images.sh runs it before the tests)
builds the operator and the three CPU agents; here the session fixture runs the same build,
which finds them up to date. Then each framework's image runs the digits evaluation through
``mlms run --runtime docker``, and the container path is shown to be real: the images run as
65532, their root filesystem is read-only, a memory limit kills an evaluation that exceeds it,
and the CA bundle a build trusted is in no image.

Without an engine (no dockerd, no mmdebstrap for the base) the fixtures skip; under
MLMS_STRICT_TESTS=1 (make test) such a skip fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlmodelscope.agent import container
from mlmodelscope.controller.settings import default_image
from mlmodelscope.devtools import images
from mlmodelscope.spec.document import ModelEvaluation
from mlmodelscope.spec.evaluation import Device, FrameworkName

HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
SCENARIO = {"batchSizes": [1, 8], "warmup": 2, "minQueryCount": 20, "minDuration": "10ms"}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def client(docker_host: str) -> Any:
    return container.connect()


def _run(client: Any, image: str, script: str, **options: Any) -> tuple[int, str]:
    box = client.containers.create(
        image, ["-c", script], entrypoint=["sh"], network_mode="none", **options
    )
    try:
        box.start()
        code = int(box.wait()["StatusCode"])
        return code, box.logs().decode(errors="replace")
    finally:
        box.remove(v=True, force=True)


def _mlms(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MLMS_PUSH"))}
    return subprocess.run(
        [sys.executable, "-m", "mlmodelscope", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


# ------------------------------------------------------------------ no engine needed


def test_plan_mounts_local_files_read_only_and_rewrites_the_spec(
    digits_models: Path, tmp_path: Path
) -> None:
    from mlmodelscope.agent.digits import digits_evaluation

    doc = digits_evaluation(
        digits_models, "onnxruntime", "plan", hardware={"resources": {"limits": {"memory": "1Gi"}}}
    )
    plan = container.plan(ModelEvaluation.model_validate(doc), tmp_path)
    model = digits_models / "digits.onnx"
    assert plan.mounts == {model.resolve(): container.MOUNT_ROOT / "model" / "digits.onnx"}
    assert plan.document["spec"]["model"]["uri"] == "/mlms/model/digits.onnx"
    assert not plan.network and plan.memory_bytes == 2**30 and plan.nano_cpus is None
    ModelEvaluation.model_validate(plan.document)  # still a valid document

    doc["spec"]["model"]["uri"] = "https://example.org/digits.onnx"
    assert container.plan(ModelEvaluation.model_validate(doc), tmp_path).network
    doc["spec"]["model"]["uri"] = "pvc://models/digits.onnx"
    with pytest.raises(container.ContainerRuntimeError, match="only a cluster mounts"):
        container.plan(ModelEvaluation.model_validate(doc), tmp_path)


def test_no_engine_is_a_clear_error(digits_models: Path, tmp_path: Path) -> None:
    from mlmodelscope.agent.digits import digits_evaluation

    (tmp_path / "spec.yaml").write_text(
        yaml.safe_dump(digits_evaluation(digits_models, "onnxruntime", "no-engine"))
    )
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = f"unix://{tmp_path}/nothing.sock"
    try:
        proc = _mlms("run", "--runtime", "docker", "spec.yaml", cwd=tmp_path)
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST")
        else:
            os.environ["DOCKER_HOST"] = saved
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no Docker engine answers" in proc.stderr and "--runtime local" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------ the images


@pytest.mark.docker
@pytest.mark.slow
def test_every_cpu_image_is_built_sized_and_cached(built: dict[str, images.Built]) -> None:
    assert set(built) == {t.name for t in images.bake_targets()}
    for result in built.values():
        assert result.size > 50_000_000, result
        assert not result.over or result.waiver, f"{result.name} is over its size target"
    again = images.build()  # nothing changed: every image is found up to date
    assert all(r.cached for r in again), [r.name for r in again if not r.cached]
    assert all(r.seconds < 30 for r in again), [(r.name, r.seconds) for r in again]


def _source_tree(into: Path) -> Path:
    """What the image tool and the operator image's build read, copied to ``into``."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(images.ROOT / name, into / name)
    shutil.copytree(images.IMAGES, into / "images")
    shutil.copytree(
        images.ROOT / "operator" / "mlmodelscope",
        into / "operator" / "mlmodelscope",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return into


@pytest.mark.docker
@pytest.mark.slow
def test_a_code_change_rebuilds_only_the_project_layer(
    built: dict[str, images.Built], client: Any, tmp_path: Path
) -> None:
    """The operator image, built again by the image tool from a copy of the sources with one
    module changed (under another registry name, so the built image stays): every layer is
    the built image's but the project's, a few MB; the dependencies' layer is reused."""
    tree = _source_tree(tmp_path / "tree")
    changed = tree / "operator" / "mlmodelscope" / "server" / "__init__.py"
    changed.write_text(changed.read_text() + "\n# a code change\n")
    registry = "mlmodelscope.test"
    env = {**os.environ, "PYTHONPATH": str(tree / "operator"), "REGISTRY": registry}
    args = [sys.executable, "-m", "mlmodelscope.devtools.images", "build", "--only", "operator"]
    if HOST_CA_BUNDLE.is_file():
        args += ["--ca-bundle", str(HOST_CA_BUNDLE)]
    proc = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    ours = client.images.get(built["operator"].tag)
    tag = f"{registry}/{built['operator'].tag.split('/', 2)[-1]}"
    try:
        theirs = client.images.get(tag)
        before, after = ours.attrs["RootFS"]["Layers"], theirs.attrs["RootFS"]["Layers"]
        assert len(before) == len(after), (before, after)
        assert sum(a != b for a, b in zip(before, after, strict=True)) == 1, (before, after)
        layers = {step["CreatedBy"]: step["Size"] for step in theirs.history()}
        (project,) = [size for step, size in layers.items() if "--no-deps" in step]
        (dependencies,) = [size for step, size in layers.items() if "pip uninstall" in step]
        assert 0 < project < 20_000_000 and dependencies > 100_000_000, layers
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("name", ["operator", *(f"agent-{f}-cpu" for f in FRAMEWORKS)])
def test_image_runs_as_65532_on_a_read_only_root(
    built: dict[str, images.Built], client: Any, name: str
) -> None:
    image = built[name].tag
    assert client.images.get(image).attrs["Config"]["User"] == "65532:65532"
    code, out = _run(
        client,
        image,
        "id -u; id -g; touch /x 2>&1 || echo ROOT-READ-ONLY; "
        "touch /var/cache/mlmodelscope/x && echo CACHE-WRITABLE",
        read_only=True,
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:2] == ["65532", "65532"], out
    assert "Read-only file system" in out and "ROOT-READ-ONLY" in out
    assert "CACHE-WRITABLE" in out


TASK_IMPORTS = (
    "import cv2, kubernetes.client, pycocotools.cocoeval, pyarrow.parquet, skimage.metrics, "
    "sklearn.metrics, tokenizers; print(cv2.__version__, tokenizers.__version__)"
)
"""The libraries of the task metrics (the tasks extra), of decode.library: opencv, of Parquet
text datasets (the parquet extra), and the Kubernetes client the agent writes its results
ConfigMap with (the kube extra)."""


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_agent_image_carries_the_task_libraries_and_opencv(
    built: dict[str, images.Built], client: Any, framework: str
) -> None:
    image = built[f"agent-{framework}-cpu"].tag
    code, out = _run(client, image, f"python -c '{TASK_IMPORTS}'", read_only=True)
    assert code == 0, out
    assert out.split()[0].startswith("5."), out  # OpenCV as constraints.txt pins it


def _pem_blocks(text: str) -> set[str]:
    return set(re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", text, re.S))


@pytest.mark.docker
@pytest.mark.slow
def test_the_build_ca_bundle_is_in_no_image(built: dict[str, images.Built], client: Any) -> None:
    """The build trusted the host's bundle (a BuildKit secret); the images carry only
    Debian's CA certificates: no certificate the host adds, no PIP_CERT or secret path in
    their configuration. The path is only in the text of the pip step that mounted it, in the
    image's history: a secret mount writes nothing to a layer."""
    if not HOST_CA_BUNDLE.is_file():
        pytest.skip(f"{HOST_CA_BUNDLE} is missing, so the build used no CA secret")
    image = built["agent-onnxruntime-cpu"].tag
    # the image's own bundles: Debian's, and certifi's (pip vendors one, requests uses one)
    bundles = "cat /etc/ssl/certs/ca-certificates.crt $(find /opt/venv -name cacert.pem)"
    code, theirs = _run(client, image, bundles)
    assert code == 0 and "BEGIN CERTIFICATE" in theirs
    extra = _pem_blocks(HOST_CA_BUNDLE.read_text()) - _pem_blocks(theirs)
    for name, result in built.items():
        info = client.images.get(result.tag).attrs
        config = json.dumps(info["Config"])
        assert "PIP_CERT" not in config and "/run/secrets" not in config, name
        for step in client.images.get(result.tag).history():
            created = str(step["CreatedBy"])  # the runtime stage's pip step mounted the secret
            if "/run/secrets" in created:
                assert created.startswith("RUN ") and "export PIP_CERT=" in created, (name, step)
    # the search finds a certificate where one is (Debian's bundle holds its own)
    own = sorted(_pem_blocks(theirs))[0].splitlines()
    code, out = _run(client, image, f"grep -rlF -e '{own[len(own) // 2]}' /etc/ssl/certs")
    assert "ca-certificates.crt" in out, out
    if extra:  # certificates only the host trusts (an intercepting proxy's CA)
        # a base64 line from the middle of each: key material, unique to that certificate
        needles = " ".join(f"-e '{c.splitlines()[len(c.splitlines()) // 2]}'" for c in extra)
        where = "/etc /opt /usr /var /root /home /run /tmp"
        for result in built.values():
            code, out = _run(client, result.tag, f"grep -rlF {needles} {where} 2>/dev/null; true")
            assert out.strip() == "", f"a CA certificate of the host is in {result.tag}: {out}"


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_digits_evaluation_runs_in_the_framework_image(
    built: dict[str, images.Built], digits_models: Path, tmp_path: Path, framework: str
) -> None:
    from mlmodelscope.agent.digits import digits_evaluation

    name = f"docker-{framework}"
    limits = {"resources": {"limits": {"memory": "2Gi"}}}
    doc = digits_evaluation(digits_models, framework, name, scenario=SCENARIO, hardware=limits)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    proc = _mlms("run", "--runtime", "docker", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out" / f"{name}.json").read_text())
    assert result["status"] == "Succeeded", result.get("error")
    image = default_image(FrameworkName(framework), Device.CPU)
    assert image == built[f"agent-{framework}-cpu"].tag
    assert result["stack"]["container"] == {"image": image}
    host = result["stack"]["host"]
    assert host["node"] == socket.gethostname() and host["hostname"] != socket.gethostname()
    assert result["spec"]["model"]["uri"].startswith("/mlms/model/")
    assert all(row["top1"] > 0.9 for row in result["results"]), result["results"]
    assert "recorded in" in proc.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_an_evaluation_over_its_memory_limit_is_oom_killed(
    built: dict[str, images.Built], digits_models: Path, tmp_path: Path
) -> None:
    from mlmodelscope.agent.digits import digits_evaluation

    limits = {"resources": {"limits": {"memory": "40Mi"}}}
    doc = digits_evaluation(digits_models, "onnxruntime", "docker-oom", hardware=limits)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    proc = _mlms("run", "--runtime", "docker", "--no-store", "spec.yaml", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "OOMKilled" in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "docker-oom.json").exists()
