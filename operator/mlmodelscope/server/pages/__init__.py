"""The dashboard's HTML: pure functions from runs and result documents to pages
(:mod:`.render`); the routes that fetch them from the store are in ``server/dashboard.py``."""
