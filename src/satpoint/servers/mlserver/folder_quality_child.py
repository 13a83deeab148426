"""The child process of ``servers.mlserver.folder_quality.predict_folders``: loads each model folder through its
MLServer runtime and answers the requests of the evaluation file, so that a folder's code runs outside
satpoint's process and environment.

``python -m satpoint.servers.mlserver.folder_quality_child SPEC`` with SPEC a JSON file ``{"variants": [[folder,
runtime], ...], "eval": path, "out": path}``; writes ``{"answers": [{"labels", "proba", "label_output",
"implementation"}, ...]}`` (in the order of ``variants``) or ``{"error": message}`` (a ``ValueError``:
a line of the file, a refused request) to ``out``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    from satpoint.servers.mlserver.folder_quality import predict_folder, read_eval_data

    spec = json.loads(Path(argv[0]).read_text())
    out = Path(spec["out"])
    try:
        requests = read_eval_data(spec["eval"])
        answers: list[dict[str, Any]] = []
        for folder, runtime in spec["variants"]:
            a = predict_folder(folder, requests, spec["eval"], runtime)
            answers.append({
                "labels": a.labels.tolist(),
                "proba": None if a.proba is None else a.proba.tolist(),
                "label_output": a.label_output,
                "implementation": a.implementation,
            })  # fmt: skip
    except ValueError as e:
        out.write_text(json.dumps({"error": str(e)}))
        return 1
    out.write_text(json.dumps({"answers": answers}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
