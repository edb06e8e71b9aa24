"""`python -m mlmodelscope.devcluster build|up|down|status` (and the internal `execlet`)."""

from mlmodelscope.devcluster.cli import app

app(prog_name="python -m mlmodelscope.devcluster")
