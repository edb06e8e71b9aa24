"""The GPU kit: one prepared command that runs mlmodelscope's CUDA path on a borrowed GPU machine.

``python -m mlmodelscope.devtools.gpukit prepare`` (here, with network) downloads the wheels
the GPU machine lacks into ``.gpukit/wheels`` and prints the exact remote call;
``python -m mlmodelscope.devtools.gpukit run OUT`` (there, no network) unpacks them, runs
each step in its own process under its own timeout, and writes ``results.json`` and
``summary.txt`` to OUT. Without a GPU the same command runs each GPU step's tiny CPU variant
and reports the step as skipped ("no GPU"): CI's dry run. See docs/gpu.md.

``bundle`` (download, size check, unpacking), ``driver`` (steps under time limits) and
``record`` (the results document and its check) use the standard library only: they run
before the bundle is unpacked, when pydantic may be missing. ``steps`` (with ``plans``,
``bare``, ``energy``, ``ncu`` and ``environment``) runs in the step processes;
``ncu_target`` is the program Nsight Compute profiles (torch only, run by its path).
"""
