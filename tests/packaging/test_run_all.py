"""benchmarks/run_all.py: every step names a script that exists and a table block its doc has,
and a block is replaced in place (the one command the docs promise, docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", REPO / "benchmarks" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = module
    spec.loader.exec_module(module)
    return module


def test_every_step_has_its_script_and_its_block_in_the_docs() -> None:
    module = run_all()
    for step in module.STEPS:
        assert (REPO / "benchmarks" / step.script).is_file(), step.script
        begin, end = module.marker(step.name)
        text = step.doc.read_text()
        assert begin in text and end in text, f"{step.doc.name} lacks the block of {step.name}"


def test_quick_and_full_select_one_variant_of_each_step() -> None:
    module = run_all()
    for full in (False, True):
        names = [s.name for s in module.selected([], full)]
        assert len(names) == len(set(names)), names
    assert "--full" not in str(module.selected([], False))
    quick = {s.name: s for s in module.selected(["operator-load"], False)}
    full = {s.name: s for s in module.selected(["operator-load"], True)}
    assert "5000" not in " ".join(quick["operator-load"].args)
    assert "5000" in " ".join(full["operator-load"].args)
    with pytest.raises(SystemExit, match="no step nonsense"):
        module.selected(["nonsense"], False)


def test_a_block_is_replaced_in_place_and_a_missing_one_is_an_error() -> None:
    module = run_all()
    begin, end = module.marker("x")
    text = f"before\n{begin}\nold table\n{end}\nafter\n"
    assert module.replace_block(text, "x", "| new |") == f"before\n{begin}\n| new |\n{end}\nafter\n"
    with pytest.raises(KeyError):
        module.replace_block("no markers", "x", "| new |")


def test_table_lines_keeps_only_the_markdown_tables_of_an_output() -> None:
    module = run_all()
    out = "progress 1/3\n| a | b |\n|---|---|\n| 1 | 2 |\nmore text\n| c |\n|---|\n"
    assert module.table_lines(out) == "| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|"


def test_the_analysis_doc_names_the_one_command_that_writes_its_blocks() -> None:
    """docs/analysis.md's command lists exactly the steps that write into it, and every table in
    it sits inside one of their blocks (nothing typed by hand)."""
    module = run_all()
    text = module.ANALYSIS_DOC.read_text()
    names = [s.name for s in module.STEPS if s.doc == module.ANALYSIS_DOC]
    assert f"benchmarks/run_all.py --only {','.join(names)}" in text
    inside = False
    for line in text.splitlines():
        if line.startswith("<!-- benchmarks/run_all.py:"):
            inside = True
        elif line.startswith("<!-- end:"):
            inside = False
        elif line.startswith("|"):
            assert inside, f"a table row outside the generated blocks: {line[:60]}"
