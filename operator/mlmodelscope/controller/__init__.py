"""The Kubernetes operator: turns ModelEvaluation resources into evaluation Jobs and results.

Layout (Kopf idioms, see shared/STYLE.md): ``main`` holds only the thin Kopf decorators,
``handlers/handle_*.py`` say what happens on each event, ``builders`` build every child object
as a plain dict, ``status`` computes conditions and phases, ``queue`` decides admission under
the concurrency limits, ``results`` turns the agent's output into status, and ``settings``
reads the ``MLMS_OPERATOR_*`` environment once. Named ``controller`` because ``operator``
would shadow the standard library module.
"""
