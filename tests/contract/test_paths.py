"""The one path hook: container paths stay in a real pod, map to host folders in an exec pod."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlmodelscope.contract.paths import PATH_MAP_ENV, container_path, map_path, parse_path_map


def test_without_a_map_every_path_is_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PATH_MAP_ENV, raising=False)
    assert container_path("/var/run/secrets/kubernetes.io/serviceaccount/token") == (
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )
    assert parse_path_map(None) == {} and parse_path_map("") == {}


def test_longest_prefix_on_whole_components(tmp_path: Path) -> None:
    mapping = {"/data": str(tmp_path / "d"), "/data/deep": str(tmp_path / "deep")}
    assert map_path("/data/x", mapping) == str(tmp_path / "d" / "x")
    assert map_path("/data/deep/x", mapping) == str(tmp_path / "deep" / "x")
    assert map_path("/database", mapping) == "/database"
    assert map_path("/data", mapping) == str(tmp_path / "d")


def test_a_host_path_the_kubelet_substituted_is_not_mapped_twice(tmp_path: Path) -> None:
    results = tmp_path / "volumes" / "results"
    mapping = {"/var/run/mlmodelscope/results": str(results)}
    assert map_path(str(results / "result.json"), mapping) == str(results / "result.json")


def test_an_existing_host_path_under_a_mounted_prefix_stays(tmp_path: Path) -> None:
    cached = tmp_path / "cache" / "m.onnx"
    cached.parent.mkdir()
    cached.write_bytes(b"m")
    top = "/" + tmp_path.parts[1]
    mapping = {top: str(tmp_path / "volume")}
    assert map_path(str(cached), mapping) == str(cached)
    assert map_path(f"{top}/new.json", mapping) == str(tmp_path / "volume" / "new.json")


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", json.dumps({"/a": 1})])
def test_a_bad_map_is_an_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=PATH_MAP_ENV):
        parse_path_map(raw)
