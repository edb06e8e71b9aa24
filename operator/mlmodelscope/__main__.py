"""`python -m mlmodelscope` is `mlms`."""

from mlmodelscope.cli import main

main()
