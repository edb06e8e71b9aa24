"""Plain handler functions, one module per event the operator reacts to; ``main`` wires them
to Kopf. Each takes dict bodies and a :class:`~mlmodelscope.controller.context.Context`."""
