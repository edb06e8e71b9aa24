# The two commands that matter on a fresh machine (see README.md).
.PHONY: demo test lint crd constraints cluster-up cluster-down clean

demo:  ## set up and evaluate the digits CNN in PyTorch, TensorFlow and ONNX Runtime (no cluster)
	./hack/demo.sh

test:  ## set up everything and run lint, type checks and all tests
	./hack/test.sh

lint:
	.venv/bin/ruff check operator tests examples benchmarks && .venv/bin/ruff format --check operator tests examples benchmarks && .venv/bin/mypy

crd:  ## regenerate crds/ from the spec models
	.venv/bin/mlms crd

constraints:  ## re-pin constraints.txt from the current environment
	.venv/bin/pip freeze --exclude-editable | grep -v '^mlmodelscope' > constraints.txt

cluster-up:
	.venv/bin/mlms dev-cluster up

cluster-down:
	.venv/bin/mlms dev-cluster down

clean:
	rm -rf .venv results examples/models/build .mypy_cache .ruff_cache .pytest_cache
