"""A 2x super-resolution model in miniature for the image-to-image tests: an ONNX graph of one
bilinear Resize (the agent's task runs and the Try page's)."""

from __future__ import annotations

from pathlib import Path


def write_upscaler(path: Path, channels: int) -> None:
    """An ONNX model that doubles an image's size ([N, C, 24, 24] to [N, C, 48, 48]) by
    ONNX Runtime's bilinear Resize: a super-resolution model in miniature."""
    import onnx
    from onnx import TensorProto, helper

    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    graph = helper.make_graph(
        [helper.make_node("Resize", ["input", "", "scales"], ["upscaled"], mode="linear")],
        "upscaler",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", channels, 24, 24])],
        [helper.make_tensor_value_info("upscaled", TensorProto.FLOAT, ["n", channels, 48, 48])],
        [scales],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
