"""Cost of reassembling one large gRPC stream message from many DATA frames on the receive path.

Feeds a message of SIZE bytes, in FRAME-byte DATA frames, into a connection of the stream pool (no socket,
no server; the frames go straight to ``data_received``) and prints the time per message.  With ``--module
PATH`` the ``grpc_stream`` module is loaded from PATH instead (e.g. an older version from ``git show``), so
two versions are measured by the same harness:

    git show <commit>:src/satpoint/transports/grpc/stream.py > /tmp/grpc_stream_old.py
    python benchmarks/stream_reassembly.py --size-mib 16 --frame-kib 16 --module /tmp/grpc_stream_old.py
    python benchmarks/stream_reassembly.py --size-mib 16 --frame-kib 16
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np
from hpack import Encoder

from satpoint.metrics.records import Records
from satpoint.transports.grpc import stream as current
from satpoint.transports.grpc import wire as gw
from satpoint.transports.grpc.codec import encode_infer_request, grpc_frame
from satpoint.transports.grpc.grpc_proto import message


class _Wire:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None


def _load(path: str | None) -> ModuleType:
    if path is None:
        return current
    spec = importlib.util.spec_from_file_location("grpc_stream_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def once(mod: ModuleType, size: int, frame: int) -> float:
    resp = message("ModelInferResponse")(model_name="m", id="1")
    out = resp.outputs.add(name="t", datatype="BYTES", shape=[1])
    out.contents.bytes_contents.append(b"x" * size)
    wire = grpc_frame(resp.SerializeToString())
    req = encode_infer_request({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}, "m")
    enc = Encoder()
    frames = [gw.frame(gw.DATA, 0, 1, wire[i : i + frame]) for i in range(0, len(wire), frame)]
    head = gw.frame(gw.HEADERS, gw.END_HEADERS, 1, enc.encode([(":status", "200")]))
    trailers = gw.frame(gw.HEADERS, gw.END_HEADERS | gw.END_STREAM, 1, enc.encode([("grpc-status", "0")]))

    async def main() -> float:
        rec = Records.empty(np.zeros(1))
        pool = mod.GrpcStreamPool(rec, lambda: None, "127.0.0.1", 1, [req], 8, connections=1)
        conn = mod._StreamConn(pool)
        conn.transport = _Wire()
        conn.connected = True
        pool._conns.append(conn)
        assert pool.try_send(0, 0)
        conn.data_received(head)
        t0 = time.perf_counter()
        for f in frames:
            conn.data_received(f)
        took = time.perf_counter() - t0
        conn.data_received(trailers)
        assert rec.stream is not None and int(rec.stream.chunks[0]) == 1, "the message did not come out whole"
        return took

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=float, default=16.0)
    ap.add_argument("--frame-kib", type=float, default=16.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--module", default=None, help="load grpc_stream from this file instead")
    a = ap.parse_args()
    mod = _load(a.module)
    size, frame = int(a.size_mib * 2**20), int(a.frame_kib * 1024)
    times = [once(mod, size, frame) for _ in range(max(1, min(a.repeats, 20)))]
    print(
        f"{a.module or 'current'}: {a.size_mib:g} MiB in {a.frame_kib:g} KiB frames ({-(-size // frame)} frames): "
        f"median {statistics.median(times) * 1e3:.1f} ms, min {min(times) * 1e3:.1f} ms over {len(times)}"
    )


if __name__ == "__main__":
    main()
