#!/usr/bin/env bash
# The embedded default on a fresh machine: no cluster. Installs the agent, builds the example
# digits CNN (ONNX, TorchScript, SavedModel with identical weights) and evaluates it in all
# three frameworks, printing one comparison table.
source "$(dirname "$0")/lib.sh"

stage "python environment" ensure_venv "torch,tensorflow,onnxruntime,datasets,models,store"
stage "example models" "$PY" -m mlmodelscope.agent.digits --link examples/models/build
stage "mlms run" "$VENV/bin/mlms" run examples/digits-compare.yaml --output results/digits-compare
