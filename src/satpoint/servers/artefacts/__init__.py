"""The artefact runtimes (onnxruntime, OpenVINO) served by the embedded MLServer, and their quality on the held-out
split."""
