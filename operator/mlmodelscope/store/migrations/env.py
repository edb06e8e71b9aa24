"""Alembic environment: upgrades the connection :func:`mlmodelscope.store.open_store` passes in
``config.attributes["connection"]``, or an engine made from ``sqlalchemy.url``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from mlmodelscope.store.schema import metadata

config = context.config


def _migrate(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE by copy on SQLite
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = config.attributes.get("connection")
if given is not None:
    _migrate(given)
else:
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as connection:
        _migrate(connection)
    engine.dispose()
