"""Developer and test tooling, in no image: Helm (``helm``), actionlint (``actionlint``) and
Jaeger (``jaeger``) built from their pinned Go modules into the tool cache (``gotool``), the
release workflow's digest pinning (``release``), the pytest fixtures that start a real
Prometheus, Pushgateway and Jaeger (``telemetry_servers``), and the GPU kit (``gpukit``,
docs/gpu.md)."""
