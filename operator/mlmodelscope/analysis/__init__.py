"""Model analysis from the graph: per-layer costs (``graph``), DLBricks latency composition
(``dlbricks``), Benanza lower bounds (``benanza``) over a table of devices (``devices``).

Modules import onnx / onnxruntime lazily where they can, so importing the package is cheap.
"""
