"""Helpers of the launch tests: the example catalog with its digits CNN where `mlms run` looks
for ``pvc://mlmodelscope-examples/...`` ($MLMS_PVC_ROOT), a catalog of the examples/tasks
segmenter, denoiser, detector and text classifier (:func:`task_catalog`), an app with launch
workers over a SQLite store, and waiting on a launch's state; the same app launching into the
shared fake API server (:func:`cluster_client`), and Nodes of node pools to seed it with
(:func:`node`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import yaml
from fastapi.testclient import TestClient
from serve_fixtures import READ_TOKEN, WRITE_TOKEN, bearer

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import evaluation_path
from mlmodelscope.devtools.telemetry_servers import wait_until
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.launch_cluster import ClusterLaunches
from mlmodelscope.server.launch_queue import FINAL, LaunchWorkers

CATALOG: Final = Path(__file__).parents[2] / "examples" / "catalog"
TASKS: Final = Path(__file__).parents[2] / "examples" / "tasks"
WRITE: Final = bearer(WRITE_TOKEN)
QUICK: Final = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms"}
"""Scenario settings that keep a digits run to about two seconds."""
DIGITS: Final[dict[str, Any]] = {
    "model": "digits-cnn",
    "frameworks": ["onnxruntime"],
    "scenario": "SingleStream",
    "batch_sizes": [1, 8],
    "scenario_settings": QUICK,
}
"""A launch of the catalog's digits CNN in ONNX Runtime."""
FAILS_FAST: Final = """\
apiVersion: mlmodelscope.io/v1alpha1
kind: ModelEvaluation
metadata: {name: no-such-model-onnxruntime}
spec:
  modelRef: {name: no-such-model}
  framework: {name: onnxruntime}
  dataset: {type: digits}
"""
"""A queued document `mlms run` refuses at once (exit status 2): a worker's cheapest launch."""
NS: Final = "team-a"
"""Where the cluster tests launch (`mlms serve --launch-namespace team-a`)."""


TASK_MODELS: Final = {
    "segmentation": "shapes",
    "image-to-image": "shapes",
    "detection": "shapes",
    "text-classification": "topics",
}
"""The examples/tasks evaluations :func:`task_catalog` makes Models of, and their dataset
labels."""


def task_catalog(folder: Path, build: Path = TASKS / "build") -> Path:
    """``folder/tasks.yaml``: a Model per examples/tasks evaluation of a segmentation, an
    image-to-image, a detection and a text-classification model (``shapes-segmenter``,
    ``shapes-denoiser``, ``shapes-detector``, ``topic-classifier``), with its model (the ONNX
    file in ``build``, as `python -m mlmodelscope.agent.tasks` makes it, and its TorchScript
    and SavedModel exports) and preprocessing, and its task as the Model's label:
    examples/catalog has no Model of these tasks but bert-base."""
    documents = []
    for task, dataset in TASK_MODELS.items():
        spec = yaml.safe_load((TASKS / f"{task}.yaml").read_text())["spec"]
        model = {**spec["model"], "uri": str(build / Path(spec["model"]["uri"]).name)}
        stem = Path(model["uri"]).stem
        exports = [
            {"format": "torchscript", "uri": str(build / f"{stem}.torchscript.pt")},
            {"format": "savedmodel", "uri": str(build / f"{stem}.savedmodel")},
        ]
        documents.append(
            {
                "apiVersion": "mlmodelscope.io/v1alpha1",
                "kind": "Model",
                "metadata": {"name": model["name"]},
                "spec": {
                    "task": task,
                    "dataset": dataset,
                    "model": model,
                    "exports": exports,
                    **({"preprocessing": spec["preprocessing"]} if "preprocessing" in spec else {}),
                },
            }
        )
    path = folder / "tasks.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


@contextmanager
def launch_client(store_url: str, workers: int = 1, **settings: Any) -> Iterator[TestClient]:
    """The app over ``store_url`` with the example catalog, a read and a write token, and
    ``workers`` launch workers, running (lifespan entered) while the block runs."""
    given: dict[str, Any] = {
        "read_token": READ_TOKEN,
        "write_token": WRITE_TOKEN,
        "catalog": (str(CATALOG),),
    }
    given.update(settings)
    app = create_app(ServeSettings(store_url=store_url, launch_workers=workers, **given))
    with TestClient(app, headers=bearer(READ_TOKEN)) as client:
        yield client


def workers_of(client: TestClient) -> LaunchWorkers:
    workers: LaunchWorkers = client.app.state.launches  # type: ignore[attr-defined]
    return workers


def wait_for_state(
    client: TestClient,
    launch_id: str,
    done: Callable[[str], bool] = FINAL.__contains__,
    timeout_s: float = 120,
) -> list[str]:
    """Poll the launch until ``done(state)``; returns every state seen, in order."""
    seen: list[str] = []

    def reached() -> bool:
        answer = client.get(f"/api/v1/launches/{launch_id}")
        answer.raise_for_status()
        state = answer.json()["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        return done(state)

    wait_until(reached, timeout_s, f"launch {launch_id}", interval_s=0.05)
    return seen


@contextmanager
def cluster_client(store_url: str, api: FakeApiServer, **more: Any) -> Iterator[TestClient]:
    """The app over ``store_url`` launching into ``NS`` of ``api`` (the follower polls rarely:
    the tests drive it with GETs and :meth:`ClusterLaunches.sync`); ``more`` settings."""
    settings = ServeSettings(
        store_url=store_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
        launch_namespace=NS,
        **more,
    )
    app = create_app(settings, kube=FakeKube(api))
    with TestClient(app, headers=bearer(READ_TOKEN)) as client:
        target = app.state.launch_target
        assert isinstance(target, ClusterLaunches)
        target.poll_s = 3600.0
        yield client


def node(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    gpus: int | str | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet registers it: its labels, ``nvidia.com/gpu`` capacity, taints."""
    capacity: dict[str, Any] = {"cpu": "16", "memory": "64Gi"}
    if gpus is not None:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def set_phase(api: FakeApiServer, name: str, **status: Any) -> None:
    """Write the evaluation's status as the operator would (through ``/status``)."""
    api.handle("PATCH", evaluation_path(NS, name) + "/status", {"status": status}, {})


def launch_in(client: TestClient, form: dict[str, Any]) -> list[dict[str, Any]]:
    """Launch ``form`` (write token); its launch items."""
    answer = client.post("/api/v1/launches", json=form, headers=WRITE)
    assert answer.status_code == 202, answer.text
    items: list[dict[str, Any]] = answer.json()["launches"]
    return items
