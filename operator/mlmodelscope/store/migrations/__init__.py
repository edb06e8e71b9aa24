"""Alembic migrations of the results store, applied by :func:`mlmodelscope.store.open_store`."""
