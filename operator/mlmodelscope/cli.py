"""The `mlms` command line. Commands import what they need when they run, so `mlms --help`
stays fast and a missing framework only matters to the command that uses it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from mlmodelscope import __version__

app = typer.Typer(
    name="mlms",
    help="Evaluate and benchmark deep-learning models reproducibly, locally or on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)

REPO_CRDS = Path("crds")


@app.command()
def version() -> None:
    """Print the mlmodelscope version."""
    console.print(__version__)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="ModelEvaluation YAML files.")],
) -> None:
    """Check ModelEvaluation files against the spec, naming every field at fault."""
    from mlmodelscope.spec import SpecValidationError, load_evaluations

    failed = False
    for file in files:
        try:
            loaded = load_evaluations(file)
        except SpecValidationError as exc:
            failed = True
            errors.print(f"[red]✗[/red] {exc}", highlight=False, markup=True)
            continue
        for item in loaded:
            console.print(f"[green]✓[/green] {item.source}", highlight=False)
    raise typer.Exit(1 if failed else 0)


@app.command()
def crd(
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Folder to write the CRD YAML into.")
    ] = REPO_CRDS,
    check: Annotated[
        bool, typer.Option("--check", help="Only check that the folder is up to date.")
    ] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print instead of writing.")] = False,
) -> None:
    """Generate the CustomResourceDefinitions from the spec models."""
    from mlmodelscope.spec.crd import render_crds, stale_crds, write_crds

    if stdout:
        for text in render_crds().values():
            typer.echo(text, nl=False)
        return
    if check:
        stale = stale_crds(output_dir)
        if stale:
            errors.print(f"out of date in {output_dir}: {', '.join(stale)}; run `mlms crd`")
            raise typer.Exit(1)
        console.print(f"CRDs in {output_dir} are up to date")
        return
    for path in write_crds(output_dir):
        console.print(f"wrote {path}")


def _mount_subcommands() -> None:
    """Attach sub-apps that live in optional modules."""
    try:
        from mlmodelscope.devcluster.cli import app as devcluster_app
    except ImportError:  # pragma: no cover - the module ships with the package
        return
    app.add_typer(devcluster_app, name="dev-cluster")


_mount_subcommands()


def main() -> None:
    """Console-script entry point."""
    app()
