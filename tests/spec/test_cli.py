"""The `mlms` commands of the spec: validate and crd."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mlmodelscope.cli import app

ROOT = Path(__file__).parents[2]
runner = CliRunner()


def test_validate_good_and_bad(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "examples" / "digits-server.yaml")])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "examples" / "digits-server.yaml").read_text().replace("targetQPS: auto", "")
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "spec.scenario.targetQPS: required when type is Server" in result.output


def test_crd_check_and_write(tmp_path: Path) -> None:
    assert runner.invoke(app, ["crd", "--check", "-o", str(ROOT / "crds")]).exit_code == 0
    assert runner.invoke(app, ["crd", "--check", "-o", str(tmp_path)]).exit_code == 1
    assert runner.invoke(app, ["crd", "-o", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["crd", "--check", "-o", str(tmp_path)]).exit_code == 0


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and result.output.strip()
