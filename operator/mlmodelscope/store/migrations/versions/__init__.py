"""The revisions, oldest first by down_revision (Alembic skips this file)."""
