"""The evaluation agent: the data plane every job image runs, and what `mlms run` runs locally."""
