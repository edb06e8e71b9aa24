"""Where the runs a comparison, a report or a gate reads come from: result files and folders,
run ids in the results store (``--store``, ``$MLMS_STORE_URL``) or behind a remote `mlms
serve` (``--server``), and the runs of an EvaluationSweep found by its label. The store is
opened only when some source is no file or folder. :class:`~.compare.CompareError` names the
source that fails."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlmodelscope.report.compare import CompareError, LoadedRun, load_runs

SWEEP_RUNS_LIMIT = 1000
"""At most this many runs of one sweep are compared."""


def load_compared(
    sources: list[str], store: str | None, server: str | None = None, sweep: str | None = None
) -> list[LoadedRun]:
    """The runs of ``sources`` (files, folders, run ids), opening the results store (or, with
    ``server``, a remote `mlms serve`) only when some source is no file or folder; then, with
    ``sweep``, the stored runs labelled ``mlmodelscope.io/sweep=<sweep>``, oldest first (those
    not already among ``sources``). :class:`CompareError` names a source that fails."""

    results_store = None
    try:
        if sweep is not None:
            if server:
                results_store, found = _remote_sweep(server, sweep)
            else:
                results_store = lookup_store(store, [], sweep)
                found = [
                    r.run_id for r in results_store.list_runs(sweep=sweep, limit=SWEEP_RUNS_LIMIT)
                ]
            if not found:
                raise CompareError(
                    f"--sweep {sweep}: no runs labelled mlmodelscope.io/sweep={sweep} in the "
                    f"results store {results_store.url}"
                )
            given = set(sources)
            sources = [*sources, *(r for r in reversed(found) if r not in given)]
            return load_runs(sources, results_store)
        run_ids = [source for source in sources if not Path(source).exists()]
        if run_ids and server:
            from mlmodelscope.report.remote import TOKEN_ENV, RemoteError, RemoteRuns

            try:
                results_store = RemoteRuns(server, os.environ.get(TOKEN_ENV))
                return load_runs(sources, results_store)
            except RemoteError as exc:
                raise CompareError(f"{', '.join(run_ids)}: {exc}") from None
        if run_ids:
            results_store = lookup_store(store, run_ids)
        return load_runs(sources, results_store)
    finally:
        if results_store is not None:
            results_store.close()


def _remote_sweep(server: str, sweep: str) -> tuple[Any, list[str]]:
    """The remote `mlms serve` and the run ids of ``sweep`` it has, newest first."""
    from mlmodelscope.report.remote import TOKEN_ENV, RemoteError, RemoteRuns

    try:
        remote = RemoteRuns(server, os.environ.get(TOKEN_ENV))
        return remote, remote.sweep_run_ids(sweep, SWEEP_RUNS_LIMIT)
    except RemoteError as exc:
        raise CompareError(f"--sweep {sweep}: {exc}") from None


def lookup_store(url: str | None, run_ids: list[str], sweep: str | None = None) -> Any:
    """The results store to look ``run_ids`` up in (sources that are no file or folder), or
    to find the runs of ``sweep`` in."""

    what = (
        f"--sweep {sweep}: a sweep's runs are found in the results store"
        if sweep is not None
        else f"{', '.join(run_ids)}: no such file or folder"
    )
    try:
        from mlmodelscope.store import StoreError, open_store
    except ImportError as exc:
        needs = "it needs" if sweep is not None else "run ids need"
        raise CompareError(
            f"{what}, and {needs} the results store ({exc}): install mlmodelscope[store]"
        ) from None
    try:
        return open_store(url)
    except StoreError as exc:
        raise CompareError(f"{what}; {exc}") from None
