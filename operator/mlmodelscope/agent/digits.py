"""scikit-learn's bundled 8x8 digits: the one real, download-free dataset, and its example CNN.

``digits_split`` is the single definition of the train/test split, shared by the training
script (examples/models/train_digits.py) and the agent's dataset loader, so the accuracy the
agent reports is measured on data the model never saw. ``ensure_digits_models`` builds the
example model in every format once per machine and caches it for demos, tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.sources import default_cache_dir

SPLIT_SEED = 0
"""random_state of the stratified split; changing it changes every recorded accuracy."""
TEST_FRACTION = 0.2
TRAINING_SCRIPT = Path("examples") / "models" / "train_digits.py"
MANIFEST = "manifest.json"
"""Written last by the training script: its presence marks a complete build."""
BUILD_TIMEOUT_S = 900.0
MODEL_FILES = {
    "onnx": "digits.onnx",
    "torchscript": "digits.torchscript.pt",
    "torch-export": "digits.pt2",
    "savedmodel": "digits_savedmodel",
}
"""Model format -> artifact name inside the folder ``ensure_digits_models`` returns."""
FRAMEWORK_FORMATS = {"onnxruntime": "onnx", "pytorch": "torchscript", "tensorflow": "savedmodel"}
"""The format each framework evaluates the example CNN in (as examples/digits-compare.yaml)."""


def digits_evaluation(
    models: Path, framework: str, name: str, /, **sections: Any
) -> dict[str, Any]:
    """A ModelEvaluation document for the example CNN on ``framework`` (the model files in
    ``models``, e.g. ``ensure_digits_models()``), with the examples' pre- and postprocessing on
    the digits test split: the one spec tests and benchmarks start from.

    ``sections`` are camelCase spec sections: a dict updates the section of that name one
    level deep, anything else replaces it (positional-only parameters leave ``framework=``
    free for the section).
    """
    from mlmodelscope.spec.document import API_VERSION_FULL, KIND

    fmt = FRAMEWORK_FORMATS[framework]
    spec: dict[str, Any] = {
        "model": {
            "name": "digits-cnn",
            "uri": str(models / MODEL_FILES[fmt]),
            "format": fmt,
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
        },
        "preprocessing": [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}],
        "postprocessing": [{"softmax": {}}, {"topk": {"k": 5}}],
        "framework": {"name": framework},
        "dataset": {"type": "digits"},
        "scenario": {"batchSizes": [1, 8]},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return {"apiVersion": API_VERSION_FULL, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def digits_split(split: str, cache_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 8, 8, 1) float32 HWC with raw values 0..16, and int64 labels, for ``split``.

    'train' and 'test' are a stratified 80/20 split with a fixed seed; every split keeps the
    original dataset order, so ``limit`` (first N samples) is deterministic too.

    The arrays are cached in ``<cache root>/datasets/digits/`` under a key of the
    scikit-learn and numpy versions and the split's settings: importing scikit-learn costs
    about a second of an agent's start-up, reading the cache a millisecond. A cache that
    cannot be read or written is ignored (the split is computed).
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"unknown digits split {split!r}; expected 'train', 'test' or 'all'")
    path = _split_cache_path(split, cache_dir)
    with contextlib.suppress(*_UNREADABLE), np.load(path) as cached:
        return cached["images"], cached["labels"]
    images, labels = _compute_split(split)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with staging.open("wb") as handle:
            np.savez(handle, images=images, labels=labels)
        staging.replace(path)
    return images, labels


DIGITS_SHAPE = (8, 8, 1)
"""One digits sample: HWC, one grey channel, float32 values 0..16."""
DIGITS_INK = 16.0
"""A digits pixel counts the ink in a 4x4 block of the scanned 32x32 bitmap: 0..16."""


def digits_image(data: bytes) -> np.ndarray:
    """An encoded image as a sample of the digits dataset: (8, 8, 1) float32, 0..16.

    The image is made grey (Pillow's ``L``), shrunk to 8x8 by averaging boxes of pixels (the
    dataset's own reduction: ink counted in 4x4 blocks), and 0..255 maps to 0..16, so a digit
    is light ink on a dark ground, as the dataset draws it. Raises PIL's errors for bytes it
    cannot decode.
    """
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        grey = img.convert("L")
    height, width = DIGITS_SHAPE[:2]
    if grey.size != (width, height):
        grey = grey.resize((width, height), Image.Resampling.BOX)
    pixels = np.asarray(grey, dtype=np.float32) * np.float32(DIGITS_INK / 255.0)
    return np.ascontiguousarray(pixels[..., np.newaxis])


_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
"""What reading a missing, truncated or foreign cache file raises."""


def _split_cache_path(split: str, cache_dir: Path | None) -> Path:
    key = f"{_version('scikit-learn')}-{_version('numpy')}-{SPLIT_SEED}-{TEST_FRACTION}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = cache_dir if cache_dir is not None else default_cache_dir()
    return root / "datasets" / "digits" / f"{split}-{digest}.npz"


def _compute_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)[..., np.newaxis]
    labels = np.asarray(bunch.target, dtype=np.int64)
    if split == "all":
        return np.ascontiguousarray(images), labels
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)),
        test_size=TEST_FRACTION,
        random_state=SPLIT_SEED,
        stratify=labels,
    )
    idx = np.sort(train_idx if split == "train" else test_idx)
    return np.ascontiguousarray(images[idx]), labels[idx]


def find_training_script() -> Path:
    """Locate examples/models/train_digits.py: next to the source tree, else $MLMS_EXAMPLES_DIR.

    The script is an example, not package data, so an installed (non-editable) package finds
    it only through the environment variable.
    """
    for parent in Path(__file__).resolve().parents:
        candidate = parent / TRAINING_SCRIPT
        if candidate.is_file():
            return candidate
    env = os.environ.get("MLMS_EXAMPLES_DIR")
    if env:
        candidate = Path(env) / "models" / "train_digits.py"
        if candidate.is_file():
            return candidate
        raise FileNotFoundError(f"MLMS_EXAMPLES_DIR={env} has no models/train_digits.py")
    raise FileNotFoundError(
        f"cannot find {TRAINING_SCRIPT} above {Path(__file__).resolve().parent}; "
        "set MLMS_EXAMPLES_DIR to the repository's examples folder"
    )


def _version(*distributions: str) -> str:
    for dist in distributions:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    return "none"


def digits_models_key(script: Path) -> str:
    """Cache key: the training script plus the framework versions that shape its outputs.

    Versions come from package metadata so computing the key imports no framework.
    """
    digest = hashlib.sha256(script.read_bytes())
    for dists in (("torch",), ("tensorflow", "tensorflow-cpu"), ("onnx",)):
        digest.update(f"\0{dists[0]}={_version(*dists)}".encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so parallel test workers or agents build only once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(final: Path, command: list[str], what: str, timeout_s: float) -> Path:
    """Run ``command --out STAGING`` once per machine and move STAGING to ``final``.

    A complete build is marked by its MANIFEST; a lock makes concurrent callers wait for one
    build; the build runs in a subprocess so framework state (threads, seeds, devices) never
    leaks into the caller, and a failed build leaves nothing that looks complete.
    """
    if (final / MANIFEST).is_file():
        return final
    with _file_lock(final.parent / f"{final.name}.lock"):
        if (final / MANIFEST).is_file():
            return final
        staging = final.parent / f"{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONHASHSEED": "0",
        }
        proc = subprocess.run(
            [*command, "--out", str(staging)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode != 0 or not (staging / MANIFEST).is_file():
            shutil.rmtree(staging, ignore_errors=True)
            tail = (proc.stdout + proc.stderr)[-4000:]
            raise RuntimeError(f"building {what} failed:\n{tail}")
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    return final


def ensure_digits_models(cache_dir: Path | None = None) -> Path:
    """The folder holding the example digits CNN in every format, building it on first use.

    ``cache_dir`` replaces the cache root (default: ``sources.default_cache_dir()``, i.e.
    $MLMS_CACHE_DIR or ~/.cache/mlmodelscope); the models live in ``<root>/models/digits/<key>``.
    """
    script = find_training_script()
    base = (cache_dir if cache_dir is not None else default_cache_dir()) / "models" / "digits"
    final = base / digits_models_key(script)
    command = [sys.executable, str(script)]
    return build_once(final, command, f"the digits models with {script}", BUILD_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    """`python -m mlmodelscope.agent.digits [--link DIR]`: build (or reuse) the cached models
    and optionally point DIR at them, which is where the examples' relative URIs look."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--link", type=Path, help="make this path a symlink to the models")
    args = parser.parse_args(argv)
    return build_and_link("digits models", ensure_digits_models, args.link)


def build_and_link(what: str, ensure: Callable[[], Path], link: Path | None) -> int:
    """Build (or reuse) a cached folder with ``ensure``, say where and how long it took, and
    point ``link`` at it when given: the ``--link`` commands of the example builds."""
    import time

    start = time.monotonic()
    folder = ensure()
    print(f"{what}: {folder} ({time.monotonic() - start:.1f} s)")  # noqa: T201
    if link is not None:
        link_folder(link, folder)
        print(f"linked {link} -> {folder}")  # noqa: T201
    return 0


def link_folder(link: Path, folder: Path) -> None:
    """Make ``link`` a symlink to ``folder``, replacing whatever ``link`` was."""
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder, target_is_directory=True)


if __name__ == "__main__":
    raise SystemExit(main())
