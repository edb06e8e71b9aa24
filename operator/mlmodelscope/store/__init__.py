"""The results store (SQLAlchemy 2 + Alembic): SQLite by default, PostgreSQL by URL.

>>> with open_store() as store:              # doctest: +SKIP
...     store.record(document)                # True once per run UUID
...     store.get(run_id)                     # the document as recorded
...     store.list_runs(model="digits-cnn")   # RunSummary rows, newest first
"""

from mlmodelscope.store.store import (
    NotRecordableError,
    RunSummary,
    Store,
    StoreError,
    data_dir,
    default_url,
    open_store,
)

__all__ = [
    "NotRecordableError",
    "RunSummary",
    "Store",
    "StoreError",
    "data_dir",
    "default_url",
    "open_store",
]
