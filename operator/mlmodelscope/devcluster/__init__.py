"""A real Kubernetes control plane for tests and local development, with simulated GPU nodes.

`build` compiles pinned kube-apiserver/controller-manager/scheduler/kubectl, etcd and kwok into
a cache outside the repo; `cluster.Cluster` runs them on free loopback ports; `nodes` declares
the node pools; `execlet` stands in for the kubelet on nodes whose pods really run here.
Heavy imports (kubernetes, yaml) happen in the submodules, so importing this is cheap.
"""
