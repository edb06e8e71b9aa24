"""The device of a plain launch (issue 32): the form's Device fieldset (cpu, or gpu and how
many GPUs) on a local server and on one launching into the cluster, where each node pool
carries its GPU capacity for the note that a CPU evaluation on it runs on its CPUs; the
device reaches the ModelEvaluations it makes (beside a pool's selector and tolerations), a
wrong one is 422 on its field, and on this server's own workers a gpu launch on a machine
whose framework sees no GPU fails saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from launch_fixtures import (
    DIGITS,
    NS,
    WRITE,
    cluster_client,
    launch_client,
    launch_in,
    node,
    wait_for_state,
)

from fakes import FakeApiServer
from mlmodelscope.server.node_pools import NODES_PATH
from mlmodelscope.server.pages.launch import POOL_CPUS
from mlmodelscope.server.pages.render import esc

POOL: Final = "mlmodelscope.io/pool"
GPU: Final[dict[str, Any]] = {"device": "gpu", "gpus": 2}


def _api() -> FakeApiServer:
    api = FakeApiServer()
    api.add_namespace(NS)
    api.seed(NODES_PATH, node("cpu-1", {POOL: "cpu"}))
    api.seed(NODES_PATH, node("a100-1", {POOL: "gpu-a100"}, gpus=8))
    return api


def test_the_form_offers_the_device_locally_and_in_the_cluster(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        local = client.get("/launch").text
    with cluster_client(sqlite_url, _api()) as client:
        cluster = client.get("/launch").text
    for text in (local, cluster):
        assert (
            '<fieldset class="evaluation-only" id="evaluation-device"><legend>Device</legend>'
            in text
        )
        assert (
            '<select name="device"><option value="cpu">cpu</option>'
            '<option value="gpu">gpu</option></select>'
        ) in text
        assert '<label id="gpu-count" hidden>GPUs<input name="gpus"' in text
        for field in ("hardware.device", "hardware.gpus"):
            assert f'data-errors-for="{field}"' in text
    assert "fails, saying so, when the framework sees no GPU on this machine" in local
    assert 'id="pool-cpus"' not in local  # no pools to choose
    assert "the operator asks for that many nvidia.com/gpu" in cluster
    assert f'<option value="{POOL}=gpu-a100" data-gpus="8" ' in cluster
    assert f'<option value="{POOL}=cpu" data-gpus="0" ' in cluster
    assert f'<span class="hint whole" id="pool-cpus" hidden>{esc(POOL_CPUS)}</span>' in cluster


def test_the_device_reaches_the_evaluations_beside_the_pools_hardware(sqlite_url: str) -> None:
    hardware = {**GPU, "nodeSelector": {POOL: "gpu-a100"}}
    form = {**DIGITS, "frameworks": ["onnxruntime", "pytorch"], "hardware": hardware}
    api = _api()
    with cluster_client(sqlite_url, api) as client:
        preview = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
        assert preview.status_code == 200, preview.text
        assert "hardware:\n    device: gpu\n    gpus: 2\n" in preview.json()["yaml"]
        documents = list(yaml.safe_load_all(preview.json()["yaml"]))
        assert [d["spec"]["hardware"] for d in documents] == [hardware] * 2
        launch_in(client, form)
        created = api.of("modelevaluations", NS)
        assert [o["spec"]["hardware"] for o in created] == [hardware] * 2


@pytest.mark.parametrize(
    ("hardware", "loc", "says"),
    [
        ({"device": "tpu"}, ["body", "hardware", "device"], "Input should be 'cpu' or 'gpu'"),
        ({"device": "gpu", "gpus": 65}, ["body", "hardware", "gpus"], "less than or equal to 64"),
        ({"device": "gpu", "gpus": "two"}, ["body", "hardware", "gpus"], "valid integer"),
        ({"gpus": 2}, ["body", "hardware", "gpus"], "gpus > 0 needs device: gpu"),
    ],
)
def test_a_wrong_device_is_refused_on_its_field(
    sqlite_url: str, hardware: dict[str, Any], loc: list[Any], says: str
) -> None:
    """Located where the page shows it: under the device or the GPU count."""
    with launch_client(sqlite_url, workers=0) as client:
        form = {**DIGITS, "hardware": hardware}
        answer = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"] == loc
    assert says in problem["msg"]


@pytest.mark.frameworks
def test_a_gpu_launch_where_the_framework_sees_no_gpu_fails_saying_so(
    sqlite_url: str, pvc_root: Path
) -> None:
    """This server's `mlms run` honours the device: ONNX Runtime without its CUDA provider
    refuses a gpu evaluation with the reason, which becomes the launch's message; the failed
    run is recorded."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has a CUDA provider: the launch could run on a GPU")
    with launch_client(sqlite_url, workers=1) as client:
        [launch] = launch_in(client, {**DIGITS, "hardware": GPU})
        wait_for_state(client, launch["launch_id"])
        done = client.get(launch["location"]).json()
        run = client.get(f"/api/v1/runs/{done['run_id']}").json()
    assert done["state"] == "failed"
    assert "hardware.device is gpu but onnxruntime" in done["message"]
    assert "has no CUDAExecutionProvider" in done["message"]
    assert run["status"] == "Failed"  # recorded, with the same reason
    assert "hardware.device is gpu" in run["error"]["message"]
