"""The embedded MLServer: its settings, the user's model folder (ONNX conversion, quality check)."""
