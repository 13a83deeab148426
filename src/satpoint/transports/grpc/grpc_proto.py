"""The Open Inference Protocol's gRPC messages, built at import from a stored descriptor.

``proto/grpc_predict_v2.proto`` is the source (the inference calls and the model-repository extension's);
the serialized ``FileDescriptorProto`` below was made from it by ``protoc`` (regenerate with
``python -m satpoint.transports.grpc.grpc_proto --regen``, which needs ``grpcio-tools``, not a dependency: the
.proto's header says how; grpcio-tools 1.76.0 made the stored one).  Building message classes from a
descriptor instead of checking in ``*_pb2.py`` gencode keeps satpoint working with any protobuf runtime
from 4.25 on (gencode pins a minimum runtime), and the messages live in a private descriptor pool, so they
never clash with another copy of the same ``inference.*`` names (MLServer's or Triton's) imported into the
same process.
"""

from __future__ import annotations

import base64
import sys
from functools import cache
from typing import Any

SERVICE = "inference.GRPCInferenceService"

_DESCRIPTOR_B64 = (
    "ChVncnBjX3ByZWRpY3RfdjIucHJvdG8SCWluZmVyZW5jZSITChFTZXJ2ZXJMaXZlUmVxdWVzdCIoChJTZXJ2ZXJMaXZlUmVz"
    "cG9uc2USEgoEbGl2ZRgBIAEoCFIEbGl2ZSIUChJTZXJ2ZXJSZWFkeVJlcXVlc3QiKwoTU2VydmVyUmVhZHlSZXNwb25zZRIU"
    "CgVyZWFkeRgBIAEoCFIFcmVhZHkiQQoRTW9kZWxSZWFkeVJlcXVlc3QSEgoEbmFtZRgBIAEoCVIEbmFtZRIYCgd2ZXJzaW9u"
    "GAIgASgJUgd2ZXJzaW9uIioKEk1vZGVsUmVhZHlSZXNwb25zZRIUCgVyZWFkeRgBIAEoCFIFcmVhZHkiFwoVU2VydmVyTWV0"
    "YWRhdGFSZXF1ZXN0ImYKFlNlcnZlck1ldGFkYXRhUmVzcG9uc2USEgoEbmFtZRgBIAEoCVIEbmFtZRIYCgd2ZXJzaW9uGAIg"
    "ASgJUgd2ZXJzaW9uEh4KCmV4dGVuc2lvbnMYAyADKAlSCmV4dGVuc2lvbnMiRAoUTW9kZWxNZXRhZGF0YVJlcXVlc3QSEgoE"
    "bmFtZRgBIAEoCVIEbmFtZRIYCgd2ZXJzaW9uGAIgASgJUgd2ZXJzaW9uIrcFChVNb2RlbE1ldGFkYXRhUmVzcG9uc2USEgoE"
    "bmFtZRgBIAEoCVIEbmFtZRIaCgh2ZXJzaW9ucxgCIAMoCVIIdmVyc2lvbnMSGgoIcGxhdGZvcm0YAyABKAlSCHBsYXRmb3Jt"
    "EkcKBmlucHV0cxgEIAMoCzIvLmluZmVyZW5jZS5Nb2RlbE1ldGFkYXRhUmVzcG9uc2UuVGVuc29yTWV0YWRhdGFSBmlucHV0"
    "cxJJCgdvdXRwdXRzGAUgAygLMi8uaW5mZXJlbmNlLk1vZGVsTWV0YWRhdGFSZXNwb25zZS5UZW5zb3JNZXRhZGF0YVIHb3V0"
    "cHV0cxJQCgpwYXJhbWV0ZXJzGAYgAygLMjAuaW5mZXJlbmNlLk1vZGVsTWV0YWRhdGFSZXNwb25zZS5QYXJhbWV0ZXJzRW50"
    "cnlSCnBhcmFtZXRlcnMakQIKDlRlbnNvck1ldGFkYXRhEhIKBG5hbWUYASABKAlSBG5hbWUSGgoIZGF0YXR5cGUYAiABKAlS"
    "CGRhdGF0eXBlEhQKBXNoYXBlGAMgAygDUgVzaGFwZRJfCgpwYXJhbWV0ZXJzGAQgAygLMj8uaW5mZXJlbmNlLk1vZGVsTWV0"
    "YWRhdGFSZXNwb25zZS5UZW5zb3JNZXRhZGF0YS5QYXJhbWV0ZXJzRW50cnlSCnBhcmFtZXRlcnMaWAoPUGFyYW1ldGVyc0Vu"
    "dHJ5EhAKA2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVyUGFyYW1ldGVyUgV2YWx1ZToC"
    "OAEaWAoPUGFyYW1ldGVyc0VudHJ5EhAKA2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVy"
    "UGFyYW1ldGVyUgV2YWx1ZToCOAEinQgKEU1vZGVsSW5mZXJSZXF1ZXN0Eh0KCm1vZGVsX25hbWUYASABKAlSCW1vZGVsTmFt"
    "ZRIjCg1tb2RlbF92ZXJzaW9uGAIgASgJUgxtb2RlbFZlcnNpb24SDgoCaWQYAyABKAlSAmlkEkwKCnBhcmFtZXRlcnMYBCAD"
    "KAsyLC5pbmZlcmVuY2UuTW9kZWxJbmZlclJlcXVlc3QuUGFyYW1ldGVyc0VudHJ5UgpwYXJhbWV0ZXJzEkUKBmlucHV0cxgF"
    "IAMoCzItLmluZmVyZW5jZS5Nb2RlbEluZmVyUmVxdWVzdC5JbmZlcklucHV0VGVuc29yUgZpbnB1dHMSUQoHb3V0cHV0cxgG"
    "IAMoCzI3LmluZmVyZW5jZS5Nb2RlbEluZmVyUmVxdWVzdC5JbmZlclJlcXVlc3RlZE91dHB1dFRlbnNvclIHb3V0cHV0cxIs"
    "ChJyYXdfaW5wdXRfY29udGVudHMYByADKAxSEHJhd0lucHV0Q29udGVudHMazQIKEEluZmVySW5wdXRUZW5zb3ISEgoEbmFt"
    "ZRgBIAEoCVIEbmFtZRIaCghkYXRhdHlwZRgCIAEoCVIIZGF0YXR5cGUSFAoFc2hhcGUYAyADKANSBXNoYXBlEl0KCnBhcmFt"
    "ZXRlcnMYBCADKAsyPS5pbmZlcmVuY2UuTW9kZWxJbmZlclJlcXVlc3QuSW5mZXJJbnB1dFRlbnNvci5QYXJhbWV0ZXJzRW50"
    "cnlSCnBhcmFtZXRlcnMSOgoIY29udGVudHMYBSABKAsyHi5pbmZlcmVuY2UuSW5mZXJUZW5zb3JDb250ZW50c1IIY29udGVu"
    "dHMaWAoPUGFyYW1ldGVyc0VudHJ5EhAKA2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVy"
    "UGFyYW1ldGVyUgV2YWx1ZToCOAEa8wEKGkluZmVyUmVxdWVzdGVkT3V0cHV0VGVuc29yEhIKBG5hbWUYASABKAlSBG5hbWUS"
    "ZwoKcGFyYW1ldGVycxgCIAMoCzJHLmluZmVyZW5jZS5Nb2RlbEluZmVyUmVxdWVzdC5JbmZlclJlcXVlc3RlZE91dHB1dFRl"
    "bnNvci5QYXJhbWV0ZXJzRW50cnlSCnBhcmFtZXRlcnMaWAoPUGFyYW1ldGVyc0VudHJ5EhAKA2tleRgBIAEoCVIDa2V5Ei8K"
    "BXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVyUGFyYW1ldGVyUgV2YWx1ZToCOAEaWAoPUGFyYW1ldGVyc0VudHJ5EhAK"
    "A2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVyUGFyYW1ldGVyUgV2YWx1ZToCOAEi3wUK"
    "Ek1vZGVsSW5mZXJSZXNwb25zZRIdCgptb2RlbF9uYW1lGAEgASgJUgltb2RlbE5hbWUSIwoNbW9kZWxfdmVyc2lvbhgCIAEo"
    "CVIMbW9kZWxWZXJzaW9uEg4KAmlkGAMgASgJUgJpZBJNCgpwYXJhbWV0ZXJzGAQgAygLMi0uaW5mZXJlbmNlLk1vZGVsSW5m"
    "ZXJSZXNwb25zZS5QYXJhbWV0ZXJzRW50cnlSCnBhcmFtZXRlcnMSSQoHb3V0cHV0cxgFIAMoCzIvLmluZmVyZW5jZS5Nb2Rl"
    "bEluZmVyUmVzcG9uc2UuSW5mZXJPdXRwdXRUZW5zb3JSB291dHB1dHMSLgoTcmF3X291dHB1dF9jb250ZW50cxgGIAMoDFIR"
    "cmF3T3V0cHV0Q29udGVudHMa0AIKEUluZmVyT3V0cHV0VGVuc29yEhIKBG5hbWUYASABKAlSBG5hbWUSGgoIZGF0YXR5cGUY"
    "AiABKAlSCGRhdGF0eXBlEhQKBXNoYXBlGAMgAygDUgVzaGFwZRJfCgpwYXJhbWV0ZXJzGAQgAygLMj8uaW5mZXJlbmNlLk1v"
    "ZGVsSW5mZXJSZXNwb25zZS5JbmZlck91dHB1dFRlbnNvci5QYXJhbWV0ZXJzRW50cnlSCnBhcmFtZXRlcnMSOgoIY29udGVu"
    "dHMYBSABKAsyHi5pbmZlcmVuY2UuSW5mZXJUZW5zb3JDb250ZW50c1IIY29udGVudHMaWAoPUGFyYW1ldGVyc0VudHJ5EhAK"
    "A2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVyUGFyYW1ldGVyUgV2YWx1ZToCOAEaWAoP"
    "UGFyYW1ldGVyc0VudHJ5EhAKA2tleRgBIAEoCVIDa2V5Ei8KBXZhbHVlGAIgASgLMhkuaW5mZXJlbmNlLkluZmVyUGFyYW1l"
    "dGVyUgV2YWx1ZToCOAEi1wEKDkluZmVyUGFyYW1ldGVyEh8KCmJvb2xfcGFyYW0YASABKAhIAFIJYm9vbFBhcmFtEiEKC2lu"
    "dDY0X3BhcmFtGAIgASgDSABSCmludDY0UGFyYW0SIwoMc3RyaW5nX3BhcmFtGAMgASgJSABSC3N0cmluZ1BhcmFtEiMKDGRv"
    "dWJsZV9wYXJhbRgEIAEoAUgAUgtkb3VibGVQYXJhbRIjCgx1aW50NjRfcGFyYW0YBSABKARIAFILdWludDY0UGFyYW1CEgoQ"
    "cGFyYW1ldGVyX2Nob2ljZSLDAgoTSW5mZXJUZW5zb3JDb250ZW50cxIjCg1ib29sX2NvbnRlbnRzGAEgAygIUgxib29sQ29u"
    "dGVudHMSIQoMaW50X2NvbnRlbnRzGAIgAygFUgtpbnRDb250ZW50cxIlCg5pbnQ2NF9jb250ZW50cxgDIAMoA1INaW50NjRD"
    "b250ZW50cxIjCg11aW50X2NvbnRlbnRzGAQgAygNUgx1aW50Q29udGVudHMSJwoPdWludDY0X2NvbnRlbnRzGAUgAygEUg51"
    "aW50NjRDb250ZW50cxIjCg1mcDMyX2NvbnRlbnRzGAYgAygCUgxmcDMyQ29udGVudHMSIwoNZnA2NF9jb250ZW50cxgHIAMo"
    "AVIMZnA2NENvbnRlbnRzEiUKDmJ5dGVzX2NvbnRlbnRzGAggAygMUg1ieXRlc0NvbnRlbnRzIroBChhNb2RlbFJlcG9zaXRv"
    "cnlQYXJhbWV0ZXISHwoKYm9vbF9wYXJhbRgBIAEoCEgAUglib29sUGFyYW0SIQoLaW50NjRfcGFyYW0YAiABKANIAFIKaW50"
    "NjRQYXJhbRIjCgxzdHJpbmdfcGFyYW0YAyABKAlIAFILc3RyaW5nUGFyYW0SIQoLYnl0ZXNfcGFyYW0YBCABKAxIAFIKYnl0"
    "ZXNQYXJhbUISChBwYXJhbWV0ZXJfY2hvaWNlIlcKFlJlcG9zaXRvcnlJbmRleFJlcXVlc3QSJwoPcmVwb3NpdG9yeV9uYW1l"
    "GAEgASgJUg5yZXBvc2l0b3J5TmFtZRIUCgVyZWFkeRgCIAEoCFIFcmVhZHkiygEKF1JlcG9zaXRvcnlJbmRleFJlc3BvbnNl"
    "EkUKBm1vZGVscxgBIAMoCzItLmluZmVyZW5jZS5SZXBvc2l0b3J5SW5kZXhSZXNwb25zZS5Nb2RlbEluZGV4UgZtb2RlbHMa"
    "aAoKTW9kZWxJbmRleBISCgRuYW1lGAEgASgJUgRuYW1lEhgKB3ZlcnNpb24YAiABKAlSB3ZlcnNpb24SFAoFc3RhdGUYAyAB"
    "KAlSBXN0YXRlEhYKBnJlYXNvbhgEIAEoCVIGcmVhc29uIp8CChpSZXBvc2l0b3J5TW9kZWxMb2FkUmVxdWVzdBInCg9yZXBv"
    "c2l0b3J5X25hbWUYASABKAlSDnJlcG9zaXRvcnlOYW1lEh0KCm1vZGVsX25hbWUYAiABKAlSCW1vZGVsTmFtZRJVCgpwYXJh"
    "bWV0ZXJzGAMgAygLMjUuaW5mZXJlbmNlLlJlcG9zaXRvcnlNb2RlbExvYWRSZXF1ZXN0LlBhcmFtZXRlcnNFbnRyeVIKcGFy"
    "YW1ldGVycxpiCg9QYXJhbWV0ZXJzRW50cnkSEAoDa2V5GAEgASgJUgNrZXkSOQoFdmFsdWUYAiABKAsyIy5pbmZlcmVuY2Uu"
    "TW9kZWxSZXBvc2l0b3J5UGFyYW1ldGVyUgV2YWx1ZToCOAEiHQobUmVwb3NpdG9yeU1vZGVsTG9hZFJlc3BvbnNlIqMCChxS"
    "ZXBvc2l0b3J5TW9kZWxVbmxvYWRSZXF1ZXN0EicKD3JlcG9zaXRvcnlfbmFtZRgBIAEoCVIOcmVwb3NpdG9yeU5hbWUSHQoK"
    "bW9kZWxfbmFtZRgCIAEoCVIJbW9kZWxOYW1lElcKCnBhcmFtZXRlcnMYAyADKAsyNy5pbmZlcmVuY2UuUmVwb3NpdG9yeU1v"
    "ZGVsVW5sb2FkUmVxdWVzdC5QYXJhbWV0ZXJzRW50cnlSCnBhcmFtZXRlcnMaYgoPUGFyYW1ldGVyc0VudHJ5EhAKA2tleRgB"
    "IAEoCVIDa2V5EjkKBXZhbHVlGAIgASgLMiMuaW5mZXJlbmNlLk1vZGVsUmVwb3NpdG9yeVBhcmFtZXRlclIFdmFsdWU6AjgB"
    "Ih8KHVJlcG9zaXRvcnlNb2RlbFVubG9hZFJlc3BvbnNlMq4GChRHUlBDSW5mZXJlbmNlU2VydmljZRJLCgpTZXJ2ZXJMaXZl"
    "EhwuaW5mZXJlbmNlLlNlcnZlckxpdmVSZXF1ZXN0Gh0uaW5mZXJlbmNlLlNlcnZlckxpdmVSZXNwb25zZSIAEk4KC1NlcnZl"
    "clJlYWR5Eh0uaW5mZXJlbmNlLlNlcnZlclJlYWR5UmVxdWVzdBoeLmluZmVyZW5jZS5TZXJ2ZXJSZWFkeVJlc3BvbnNlIgAS"
    "SwoKTW9kZWxSZWFkeRIcLmluZmVyZW5jZS5Nb2RlbFJlYWR5UmVxdWVzdBodLmluZmVyZW5jZS5Nb2RlbFJlYWR5UmVzcG9u"
    "c2UiABJXCg5TZXJ2ZXJNZXRhZGF0YRIgLmluZmVyZW5jZS5TZXJ2ZXJNZXRhZGF0YVJlcXVlc3QaIS5pbmZlcmVuY2UuU2Vy"
    "dmVyTWV0YWRhdGFSZXNwb25zZSIAElQKDU1vZGVsTWV0YWRhdGESHy5pbmZlcmVuY2UuTW9kZWxNZXRhZGF0YVJlcXVlc3Qa"
    "IC5pbmZlcmVuY2UuTW9kZWxNZXRhZGF0YVJlc3BvbnNlIgASSwoKTW9kZWxJbmZlchIcLmluZmVyZW5jZS5Nb2RlbEluZmVy"
    "UmVxdWVzdBodLmluZmVyZW5jZS5Nb2RlbEluZmVyUmVzcG9uc2UiABJaCg9SZXBvc2l0b3J5SW5kZXgSIS5pbmZlcmVuY2Uu"
    "UmVwb3NpdG9yeUluZGV4UmVxdWVzdBoiLmluZmVyZW5jZS5SZXBvc2l0b3J5SW5kZXhSZXNwb25zZSIAEmYKE1JlcG9zaXRv"
    "cnlNb2RlbExvYWQSJS5pbmZlcmVuY2UuUmVwb3NpdG9yeU1vZGVsTG9hZFJlcXVlc3QaJi5pbmZlcmVuY2UuUmVwb3NpdG9y"
    "eU1vZGVsTG9hZFJlc3BvbnNlIgASbAoVUmVwb3NpdG9yeU1vZGVsVW5sb2FkEicuaW5mZXJlbmNlLlJlcG9zaXRvcnlNb2Rl"
    "bFVubG9hZFJlcXVlc3QaKC5pbmZlcmVuY2UuUmVwb3NpdG9yeU1vZGVsVW5sb2FkUmVzcG9uc2UiAGIGcHJvdG8z"
)


@cache
def _classes() -> dict[str, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(_DESCRIPTOR_B64)))
    names = [
        "ServerLiveRequest",
        "ServerLiveResponse",
        "ServerReadyRequest",
        "ServerReadyResponse",
        "ModelReadyRequest",
        "ModelReadyResponse",
        "ServerMetadataRequest",
        "ServerMetadataResponse",
        "ModelMetadataRequest",
        "ModelMetadataResponse",
        "ModelInferRequest",
        "ModelInferResponse",
        "InferParameter",
        "InferTensorContents",
        "ModelRepositoryParameter",
        "RepositoryIndexRequest",
        "RepositoryIndexResponse",
        "RepositoryModelLoadRequest",
        "RepositoryModelLoadResponse",
        "RepositoryModelUnloadRequest",
        "RepositoryModelUnloadResponse",
    ]
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName("inference." + n)) for n in names}


def message(name: str) -> Any:
    """The message class ``inference.<name>`` (e.g. ``message("ModelInferRequest")``)."""
    return _classes()[name]


def method_path(method: str) -> str:
    """The HTTP/2 ``:path`` of a call, e.g. ``/inference.GRPCInferenceService/ModelInfer``."""
    return f"/{SERVICE}/{method}"


def _regenerate() -> None:  # pragma: no cover - developer tool
    """Rebuild ``_DESCRIPTOR_B64`` from ``proto/grpc_predict_v2.proto`` with grpcio-tools' protoc."""
    import re
    import tempfile
    import textwrap
    from pathlib import Path

    from grpc_tools import protoc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "desc.bin"
        rc = protoc.main(["protoc", f"-I{here / 'proto'}", f"--descriptor_set_out={out}", "grpc_predict_v2.proto"])
        if rc != 0:
            raise SystemExit(f"protoc failed ({rc})")
        from google.protobuf import descriptor_pb2

        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
        enc = base64.b64encode(files[0].SerializeToString()).decode()
    body = "\n".join(f'    "{line}"' for line in textwrap.wrap(enc, 96))
    path = Path(__file__)
    text = re.sub(
        r"_DESCRIPTOR_B64 = \(\n.*?\n\)",
        lambda _m: f"_DESCRIPTOR_B64 = (\n{body}\n)",
        path.read_text(),
        count=1,
        flags=re.S,
    )
    path.write_text(text)
    print(f"rewrote {path}")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--regen"]:
        _regenerate()
    else:
        print("usage: python -m satpoint.transports.grpc.grpc_proto --regen")
