"""Fixtures every test folder may use: the real control plane (devcluster)."""

pytest_plugins = ["mlmodelscope.devcluster.pytest_plugin"]
