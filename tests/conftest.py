"""Fixtures every test folder may use (the real control plane, Prometheus, Pushgateway, Jaeger),
and strict mode for the full suite.

Fixtures for real parts skip when a part is missing, so a developer can run a subset on a bare
machine. `make test` installs every part and sets MLMS_STRICT_TESTS=1: there such a skip fails,
so a green run cannot hide a missing install step. Skips that describe the machine itself (a GPU
present or absent) stay skips.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cluster_split import keep_half
from mlmodelscope.tensorflow_import import before_tensorflow

if TYPE_CHECKING:
    from mlmodelscope.devcluster.cluster import Cluster
    from mlmodelscope.devtools.images import Built

# Tests import TensorFlow directly, and PyTorch's exporters (which load Triton) after it.
before_tensorflow()

pytest_plugins = [
    "mlmodelscope.devcluster.pytest_plugin",
    "mlmodelscope.devtools.telemetry_servers",
    "mlmodelscope.devtools.postgres",
]

MACHINE_SKIPS = ("GPU", "CUDA", "gpu", "cuda")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _strict() -> bool:
    return os.environ.get("MLMS_STRICT_TESTS") == "1"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_if_strict(report: Any) -> None:
    if not (_strict() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if any(word in reason for word in MACHINE_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under MLMS_STRICT_TESTS=1 (make test installs every part): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[Any]:
    outcome = yield
    _fail_if_strict(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[Any]:
    outcome = yield
    _fail_if_strict(outcome.get_result())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster-tests",
        choices=("all", "only", "none"),
        default="all",
        help="run every test (all), only those that need the dev cluster (marked cluster or "
        "using its fixture), or none of those; make test runs `only` and `none` side by side",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep_half(config, items)


@pytest.fixture(autouse=True, scope="session")
def _private_results_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`mlms run` records every run in the user's store by default: point this session (and
    the processes it starts) at its own data directory, never the user's."""
    saved = {k: os.environ.get(k) for k in ("MLMS_DATA_DIR", "MLMS_STORE_URL")}
    os.environ["MLMS_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ.pop("MLMS_STORE_URL", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def digits_models() -> Path:
    """The example CNN in every format, built on first use into $MLMS_CACHE_DIR (or the user
    cache), so later sessions reuse it; building takes ~15 s on two cores."""
    from mlmodelscope.agent.digits import ensure_digits_models

    return ensure_digits_models()


TASK_RUNS = (
    ("segmentation", "onnxruntime"),
    ("segmentation", "pytorch"),
    ("text-classification", "onnxruntime"),
)
"""(examples/tasks spec, framework) of :func:`task_documents`."""


@pytest.fixture(scope="session")
def task_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Real result documents of examples/tasks, run by the agent with quick scenario settings:
    ``{"segmentation-onnxruntime": ..., "segmentation-pytorch": ...,
    "text-classification-onnxruntime": ...}``, read back from disk. The reference models are
    built once per machine (``ensure_task_models``, cached; ~1.5 min the first time)."""
    import json

    import yaml

    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.agent.tasks.reference import ensure_task_models
    from mlmodelscope.spec import load_evaluations

    models = ensure_task_models()
    examples = Path(__file__).parents[1] / "examples" / "tasks"
    formats = {"onnxruntime": ("onnx", ".onnx"), "pytorch": ("torchscript", ".torchscript.pt")}
    folder = tmp_path_factory.mktemp("task-documents")
    documents = {}
    for task, framework in TASK_RUNS:
        doc = yaml.safe_load((examples / f"{task}.yaml").read_text())
        spec = doc["spec"]
        fmt, suffix = formats[framework]
        stem = Path(spec["model"]["uri"]).name.split(".")[0]
        spec["model"].update(uri=str(models / f"{stem}{suffix}"), format=fmt)
        spec["framework"]["name"] = framework
        for key in ("path", "masks", "tokenizer"):
            if key in spec["dataset"]:
                spec["dataset"][key] = str(models / spec["dataset"][key].removeprefix("build/"))
        spec["scenario"] = {"type": "SingleStream", "batchSizes": [1, 8], "minQueryCount": 20}
        spec["scenario"]["minDuration"] = "20ms"
        name = doc["metadata"]["name"] = f"{task}-{framework}"
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        [loaded] = load_evaluations(path)
        evaluate(loaded, output=folder / f"{name}.json")
        documents[name] = json.loads((folder / f"{name}.json").read_text())
    return documents


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """A Docker engine's DOCKER_HOST (started by the images tool if none answers), exported
    for the processes the tests start."""
    from mlmodelscope.devtools import images

    try:
        host = images.ensure_engine()
    except images.ImageBuildError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    yield host
    if saved is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = saved


@pytest.fixture(scope="session")
def built(docker_host: str) -> dict[str, Built]:
    """Every CPU image of the bake file, built (or found up to date) as hack/images.sh does."""
    from mlmodelscope.devtools import images

    ca = HOST_CA_BUNDLE if HOST_CA_BUNDLE.is_file() else None
    try:
        results = images.build(ca_bundle=ca)
    except images.ImageBuildError as exc:
        pytest.skip(f"cannot build the images here: {exc}")
    return {r.name: r for r in results}


@pytest.fixture(scope="session")
def node_images(real_node: str, cluster: Cluster, built: dict[str, Built]) -> dict[str, str]:
    """The CPU images, pushed by digest to the cluster's registry (once per image id, kept
    across sessions), which the real node's containerd pulls them from: image name in the
    bake file → reference a pod uses (``registry.mlmodelscope.local/<repository>@sha256:…``).

    Earlier generations are dropped from the node, and so are the images an earlier session
    side-loaded under the bake tags (`mlms dev-cluster load-images`)."""
    from mlmodelscope.devcluster import node, registry
    from mlmodelscope.devtools import publish

    paths = cluster.node_paths
    node.unload_images(paths.socket, paths.images_stamp, [b.tag for b in built.values()], print)
    registry.collect_garbage(registry.data_dir())  # what earlier sessions' moved tags left
    pushed = publish.push_images(cluster.registry_address, list(built.values()), log=cluster.log)
    refs = {name: p.reference for name, p in pushed.items()}
    node.drop_stale_pulls(paths.socket, list(refs.values()), print)
    return refs
