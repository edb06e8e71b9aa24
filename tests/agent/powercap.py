"""A RAPL powercap tree in a temporary folder, shaped as Linux's ``/sys/class/powercap``."""

from __future__ import annotations

from pathlib import Path


def domain(root: Path, name: str, label: str, energy_uj: int | None, top: int) -> Path:
    """One domain folder (``intel-rapl:0``) with its ``name``, ``max_energy_range_uj`` and,
    unless ``energy_uj`` is None, its ``energy_uj`` counter."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(f"{label}\n")
    if energy_uj is not None:
        (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{top}\n")
    return folder
