"""OIP over gRPC: the raw HTTP/2 hot path and its streams, the protobuf codec, the control calls and the repository API
over gRPC."""
