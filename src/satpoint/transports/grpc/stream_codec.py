"""The messages of gRPC ``ModelStreamInfer`` that satpoint's descriptor does not hold: Triton's
``ModelStreamInferResponse {string error_message = 1; ModelInferResponse infer_response = 2}`` read by a
small protobuf reader (only the fields the stream transport needs), and the request parameter that makes
a decoupled Triton model end every request with a final response.  MLServer's stream messages are bare
``ModelInferResponse`` s and need no decoding (:mod:`satpoint.transports.grpc.stream`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from satpoint.transports.grpc.grpc_proto import message

__all__ = ["TritonMessage", "ask_final_response", "triton_stream_message"]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """The top-level fields of a protobuf message: (number, wire type, value: int or bytes)."""
    out: list[tuple[int, int, Any]] = []
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i : i + length], i + length
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if i > n:
            raise ValueError("truncated protobuf message")
        out.append((number, wire, value))
    return out


@dataclass(frozen=True, slots=True)
class TritonMessage:
    """What a ``ModelStreamInferResponse`` says: the error (``""``: none), whether it holds a response with
    outputs (a chunk), and its ``triton_final_response`` parameter (None: absent)."""

    error: str
    has_outputs: bool
    final: bool | None


def triton_stream_message(msg: bytes) -> TritonMessage:
    """Decode a Triton ``ModelStreamInferResponse`` (a ValueError if it is not valid protobuf)."""
    error = ""
    response = b""
    for number, wire, value in _fields(msg):
        if number == 1 and wire == 2:
            error = bytes(value).decode("utf-8", "replace")
        elif number == 2 and wire == 2:
            response = bytes(value)
    has_outputs = False
    final: bool | None = None
    for number, wire, value in _fields(response) if response else ():
        if number in (5, 6) and wire == 2:  # ModelInferResponse.outputs (or raw_output_contents)
            has_outputs = True
        elif number == 4 and wire == 2:  # parameters: map<string, InferParameter> entry
            key, param = "", b""
            for n2, w2, v2 in _fields(bytes(value)):
                if n2 == 1 and w2 == 2:
                    key = bytes(v2).decode("utf-8", "replace")
                elif n2 == 2 and w2 == 2:
                    param = bytes(v2)
            if key == "triton_final_response":
                final = any(n3 == 1 and w3 == 0 and v3 for n3, w3, v3 in _fields(param))
    return TritonMessage(error, has_outputs, final)


def ask_final_response(request: bytes) -> bytes:
    """A serialized ``ModelInferRequest`` with the parameter ``triton_enable_empty_final_response`` true: a
    decoupled Triton model then always ends a request with a response flagged ``triton_final_response``
    (empty when the model sent none), so a complete stream can be told from one cut short."""
    msg = message("ModelInferRequest").FromString(request)
    msg.parameters["triton_enable_empty_final_response"].bool_param = True
    data: bytes = msg.SerializeToString()
    return data
