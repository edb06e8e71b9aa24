"""Developer and test tooling, in no image: Helm (``helm``) and Jaeger (``jaeger``) built from
their pinned Go modules into the tool cache, and the pytest fixtures that start a real
Prometheus, Pushgateway and Jaeger (``telemetry_servers``), and the GPU kit (``gpukit``,
docs/gpu.md)."""
