"""A DLBricks suite: the unique bricks of some models, exported as a folder of runnable models.

``mlms dlbricks MODELS --export DIR`` splits the models once (``dlbricks.split``) and writes

- ``bricks/<brick_key>.onnx``: each unique brick, a one-node model whose integer inputs
  (shapes, indices) are initializers holding their recorded values and whose float inputs are
  graph inputs of fixed shape, so it runs with nothing but ONNX Runtime and random feeds;
- ``suite.json``: the graph split and batch size, each brick's key, op and signature, and each
  model's layers as brick keys in graph order, from which an estimate is composed.

A suite is measured wherever it is copied (``mlms dlbricks-jobs``, ``analysis/brick_jobs.py``):
the same bricks on several systems, each system's timings stored under its own stack key.
Reading a suite needs only the standard library; writing one needs ``onnx``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlmodelscope.analysis.brickstore import brick_key

if TYPE_CHECKING:
    from mlmodelscope.analysis.dlbricks import BenchConfig

SUITE_FILE = "suite.json"
BRICKS_DIR = "bricks"
FORMAT = 1
"""The version of ``suite.json``'s layout; a reader refuses any other."""


class SuiteError(ValueError):
    """A folder that holds no readable suite."""


@dataclass(frozen=True)
class SuiteBrick:
    """One unique brick: its store key, op and signature (``LayerCost.signature``)."""

    key: str
    op_type: str
    signature: str

    @property
    def file(self) -> str:
        """Its model, relative to the suite folder."""
        return f"{BRICKS_DIR}/{self.key}.onnx"


@dataclass(frozen=True)
class SuiteModel:
    """A model of the suite: the brick key of each of its layers, in graph order."""

    name: str
    layers: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    graph: str
    """Which graph was split (``BenchConfig.graph``): ``optimized`` or ``raw``."""
    batch_size: int
    models: tuple[SuiteModel, ...]
    bricks: tuple[SuiteBrick, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "graph": self.graph,
            "batch_size": self.batch_size,
            "models": [{"name": m.name, "layers": list(m.layers)} for m in self.models],
            "bricks": [
                {"key": b.key, "op_type": b.op_type, "signature": b.signature} for b in self.bricks
            ],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Suite:
        """The suite ``to_dict`` wrote; :class:`SuiteError` for another format or shape."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise SuiteError(f"not a format-{FORMAT} brick suite (format: {found!r})")
        try:
            return cls(
                graph=str(data["graph"]),
                batch_size=int(data["batch_size"]),
                models=tuple(
                    SuiteModel(str(m["name"]), tuple(str(k) for k in m["layers"]))
                    for m in data["models"]
                ),
                bricks=tuple(
                    SuiteBrick(str(b["key"]), str(b["op_type"]), str(b["signature"]))
                    for b in data["bricks"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SuiteError(f"malformed brick suite: {exc!r}") from None


def read_suite(folder: Path) -> Suite:
    """The suite in ``folder``; :class:`SuiteError` when there is none."""
    path = folder / SUITE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SuiteError(f"no brick suite at {path}: {exc}") from None
    return Suite.from_dict(data)


def export_suite(
    models: Sequence[str | Path], names: Sequence[str], config: BenchConfig, folder: Path
) -> Suite:
    """Split ``models`` under ``config`` (its graph and batch size) and write their unique
    bricks and ``suite.json`` into ``folder``."""
    import onnx

    from mlmodelscope.analysis.dlbricks import split

    (folder / BRICKS_DIR).mkdir(parents=True, exist_ok=True)
    bricks: dict[str, SuiteBrick] = {}
    suite_models = []
    for name, model in zip(names, models, strict=True):
        layers, found = split(model, config)
        for signature, brick in found.items():
            key = brick_key(signature)
            if key not in bricks:
                bricks[key] = SuiteBrick(key, brick.op_type, signature)
                onnx.save(brick.model, str(folder / bricks[key].file))
        suite_models.append(SuiteModel(name, tuple(brick_key(c.signature) for c in layers)))
    suite = Suite(config.graph, config.batch_size, tuple(suite_models), tuple(bricks.values()))
    (folder / SUITE_FILE).write_text(json.dumps(suite.to_dict(), indent=1) + "\n")
    return suite
