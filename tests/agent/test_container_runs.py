"""`mlms run --runtime docker`'s loop with the container stood in for: which image each
evaluation runs in, where its document lands, and how each run ends. The real engine runs
in tests/packaging/test_images_docker.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlmodelscope.agent import container_runs
from mlmodelscope.agent.container import ContainerResult, ContainerRuntimeError
from mlmodelscope.agent.container_runs import (
    NO_DEFAULT_IMAGE,
    ContainerRun,
    image_for,
    run_in_images,
)
from mlmodelscope.spec import LoadedEvaluation, load_evaluations


def evaluations(tmp_path: Path, *names: str, image: str | None = None) -> list[LoadedEvaluation]:
    framework: dict[str, Any] = {"name": "onnxruntime", **({"image": image} if image else {})}
    documents = [
        {
            "apiVersion": "mlmodelscope.io/v1alpha1",
            "kind": "ModelEvaluation",
            "metadata": {"name": name},
            "spec": {
                "model": {
                    "name": "m",
                    "uri": "m.onnx",
                    "format": "onnx",
                    "inputs": [{"name": "x", "shape": [-1, 4]}],
                },
                "framework": framework,
                "dataset": {"type": "digits"},
            },
        }
        for name in names
    ]
    path = tmp_path / "spec.yaml"
    path.write_text("\n---\n".join(json.dumps(d) for d in documents))
    return load_evaluations(path)


def published(framework: Any, device: Any) -> str:
    return f"agent-{framework.value}-{device.value}"


def test_the_image_is_the_flag_else_the_spec_else_the_published_one(tmp_path: Path) -> None:
    [plain] = evaluations(tmp_path, "a")
    [pinned] = evaluations(tmp_path, "b", image="mine:1")
    assert image_for(plain.evaluation.spec, "flag:1", published) == "flag:1"
    assert image_for(pinned.evaluation.spec, None, published) == "mine:1"
    assert image_for(plain.evaluation.spec, None, published) == "agent-onnxruntime-cpu"
    with pytest.raises(ContainerRuntimeError, match="needs --image"):
        image_for(plain.evaluation.spec, None, lambda framework, device: None)
    assert "--image" in NO_DEFAULT_IMAGE


def succeeded(name: str) -> dict[str, Any]:
    return {"status": "Succeeded", "run_id": name}


def fake_container(
    monkeypatch: pytest.MonkeyPatch, results: dict[str, ContainerResult | Exception]
) -> None:
    """Stand in for the engine: each evaluation ends as ``results`` says."""
    monkeypatch.setattr(container_runs, "connect", lambda: "client")

    def run(evaluation: Any, base_dir: Any, image: str, **options: Any) -> ContainerResult:
        assert options["client"] == "client" and options["price_per_node_hour"] == 2.0
        options["log"](f"{evaluation.metadata.name} in {image}")
        found = results[evaluation.metadata.name]
        if isinstance(found, Exception):
            raise found
        return found

    monkeypatch.setattr(container_runs, "run_in_container", run)


def test_each_evaluation_runs_in_turn_and_its_document_lands_in_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_doc = {"status": "Failed", "error": {"type": "SpecError", "message": "bad"}}
    fake_container(
        monkeypatch,
        {
            "ok": ContainerResult(succeeded("ok"), 0, False, "img", ""),
            "bad": ContainerResult(failed_doc, 1, False, "img", ""),
            "gone": ContainerRuntimeError("cannot create the container: no space"),
        },
    )
    started: list[tuple[str, str]] = []
    logged: list[str] = []
    runs = list(
        run_in_images(
            evaluations(tmp_path, "ok", "bad", "gone"),
            tmp_path / "out",
            image="img",
            default_image=published,
            raw=True,
            price=2.0,
            starting=lambda name, image: started.append((name, image)),
            log=logged.append,
        )
    )
    assert started == [("ok", "img"), ("bad", "img"), ("gone", "img")]
    assert logged == ["ok in img", "bad in img", "gone in img"]
    ok, bad, gone = runs
    assert ok.outcome is not None and ok.error is None
    assert ok.outcome.path == tmp_path / "out" / "ok.json"
    assert json.loads(ok.outcome.path.read_text()) == succeeded("ok")
    assert bad.outcome is None and bad.document == failed_doc
    assert bad.error == str(failed_doc["error"])
    assert json.loads((tmp_path / "out" / "bad.json").read_text()) == failed_doc
    assert gone == ContainerRun("gone", "img", None, error="cannot create the container: no space")
    assert not (tmp_path / "out" / "gone.json").exists()


def test_no_engine_ends_the_loop_before_any_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_engine() -> Any:
        raise ContainerRuntimeError("cannot reach a Docker engine")

    monkeypatch.setattr(container_runs, "connect", no_engine)
    started: list[str] = []
    runs = run_in_images(
        evaluations(tmp_path, "a"),
        tmp_path,
        image=None,
        default_image=published,
        raw=True,
        price=None,
        starting=lambda name, image: started.append(name),
        log=print,
    )
    with pytest.raises(ContainerRuntimeError, match="Docker engine"):
        next(runs)
    assert started == []
