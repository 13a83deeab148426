"""Seldon Core 2 Model and autoscaling/v2 HPA manifests from a recommendation.

The HPA scales the Model on the per-replica ``infer_rps`` metric (served through prometheus-adapter
as ``rate(seldon_model_infer_total[2m])``) with ``target.type: AverageValue``.  The Model carries
``spec.replicas`` and no ``minReplicas``/``maxReplicas``: when an HPA drives a Model those must stay
unset.  Written as YAML text without a YAML library: the documents are small and fixed in shape.
"""

from __future__ import annotations

import math
from pathlib import Path

from satpoint.analysis.search.capacity import Recommendation


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def quantity(rps: float) -> str:
    """A Kubernetes quantity at or just under ``rps``: whole requests from 10 rps up, millis below."""
    if rps >= 10:
        return str(math.floor(rps))
    return f"{math.floor(rps * 1000)}m"


def model_yaml(model: str, storage_uri: str, requirements: str, replicas: int, namespace: str) -> str:
    return f"""apiVersion: mlops.seldon.io/v1alpha1
kind: Model
metadata:
  name: {model}
  namespace: {namespace}
spec:
  storageUri: "{storage_uri}"
  requirements:
  - {requirements}
  replicas: {replicas}
"""


def max_replicas_choice(rec: Recommendation) -> tuple[int, str]:
    """The HPA's maxReplicas and a sentence saying why: ``ceil(peak / target)`` with a peak; without one
    there is nothing to size it by, so it stays at minReplicas (the HPA cannot scale out)."""
    target = quantity(rec.target_rps_per_replica)
    if rec.replicas:
        return rec.replicas, (
            f"maxReplicas {rec.replicas} = ceil(peak {rec.peak_rps:g} rps / {target} rps per replica)"
        )
    chosen = max(rec.min_replicas or 1, 1)
    return chosen, (
        f"maxReplicas {chosen} (= minReplicas): no --peak-rps was given, so there is nothing to size it by and "
        f"the HPA cannot scale out; give --peak-rps P for maxReplicas = ceil(P / {target} rps per replica), "
        "or edit maxReplicas"
    )


def hpa_yaml(model: str, rec: Recommendation, namespace: str) -> str:
    max_replicas, why = max_replicas_choice(rec)
    min_replicas = rec.min_replicas or 1
    average = quantity(rec.target_rps_per_replica)
    return f"""# satpoint: {why}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {model}-model-hpa
  namespace: {namespace}
spec:
  scaleTargetRef:
    apiVersion: mlops.seldon.io/v1alpha1
    kind: Model
    name: {model}
  minReplicas: {min_replicas}
  maxReplicas: {max_replicas}
  metrics:
  - type: Object
    object:
      metric:
        name: infer_rps
      describedObject:
        apiVersion: mlops.seldon.io/v1alpha1
        kind: Model
        name: {model}
      target:
        type: AverageValue
        averageValue: {average}
"""


def write_k8s(
    out_dir: Path,
    model: str,
    rec: Recommendation,
    namespace: str = "seldon-mesh",
    storage_uri: str = "gs://YOUR-BUCKET/models/" + "MODEL",
    requirements: str = "sklearn",
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    uri = storage_uri.replace("MODEL", model)
    replicas = rec.min_replicas or 1
    paths = [out_dir / f"{model}-model.yaml", out_dir / f"{model}-hpa.yaml"]
    paths[0].write_text(
        f"# satpoint: saturation {_num(round(rec.saturation_rps, 1))} rps per replica; "
        f"target {_num(rec.target_rps_per_replica)} rps per replica (margin {rec.margin:.0%})\n"
        + model_yaml(model, uri, requirements, replicas, namespace)
    )
    paths[1].write_text(hpa_yaml(model, rec, namespace))
    return paths
