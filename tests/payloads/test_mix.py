"""Model mixes: weights, the per-row draw (exact on any shard), and the errors a user can meet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from satpoint.errors import ConfigError
from satpoint.payloads.mix import ModelMix, ResolvedMix, mix_weights, models_at, natural_order


def test_uniform_and_zipf_weights() -> None:
    assert mix_weights("uniform", ["a", "b", "c", "d"]) == pytest.approx([0.25] * 4)
    w = mix_weights("zipf:1", ["a", "b", "c"])
    assert w == pytest.approx([1 / (1 + 1 / 2 + 1 / 3), 0.5 / (1 + 1 / 2 + 1 / 3), (1 / 3) / (1 + 1 / 2 + 1 / 3)])
    assert mix_weights("zipf:0", ["a", "b"]) == pytest.approx([0.5, 0.5])


def test_weights_from_csv_and_json(tmp_path: Path) -> None:
    csv_file = tmp_path / "w.csv"
    csv_file.write_text("model,weight\n# hot first\nb,3\na,1\n")
    assert mix_weights(str(csv_file), ["a", "b"]) == pytest.approx([0.25, 0.75])
    json_file = tmp_path / "w.json"
    json_file.write_text(json.dumps([{"model": "a", "weight": 1}, {"model": "b", "weight": 0}]))
    assert mix_weights(str(json_file), ["a", "b"]) == pytest.approx([1.0, 0.0])
    json_file.write_text(json.dumps({"a": 2}))
    with pytest.raises(ConfigError, match="no weight for model"):
        mix_weights(str(json_file), ["a", "b"])
    with pytest.raises(ConfigError, match="not in the mix: c"):
        json_file.write_text(json.dumps({"a": 1, "b": 1, "c": 1}))
        mix_weights(str(json_file), ["a", "b"])


@pytest.mark.parametrize(
    ("spec", "match"),
    [("zipf", "zipf:S"), ("zipf:-1", "zipf:S"), ("nope.csv", "not uniform"), ("uniform", None)],
)
def test_bad_specs_fail_before_the_server_is_asked(spec: str, match: str | None) -> None:
    if match is None:
        ModelMix(("a",), weights=spec).validate()
        return
    with pytest.raises(ConfigError, match=match):
        ModelMix(("a",), weights=spec).validate()


def test_models_are_named_once_and_from_one_source() -> None:
    with pytest.raises(ConfigError, match="named twice"):
        ModelMix(("a", "b", "a")).validate()
    with pytest.raises(ConfigError, match="not both"):
        ModelMix(("a",), from_server=True).validate()
    with pytest.raises(ConfigError, match="needs models"):
        ModelMix().validate()


def test_the_draw_is_a_function_of_seed_and_row_so_shards_agree() -> None:
    mix = ResolvedMix(tuple(f"m{i}" for i in range(20)), mix_weights("zipf:1.1", [str(i) for i in range(20)]))
    pay, models = mix.rows(10_000, seed=7)
    for procs in (2, 3):  # every shard draws its own rows: the same models, row for row
        for shard in range(procs):
            rows = np.arange(shard, 10_000, procs)
            assert np.array_equal(models_at(rows, mix.weights, 7), models[shard::procs])
    assert np.array_equal(mix.rows(500, seed=7, start=100)[1], models[100:600])
    assert not np.array_equal(mix.rows(10_000, seed=8)[1], models)
    assert np.array_equal(pay, models.astype(np.int64))  # one request per model: the payload is the model


def test_the_draw_follows_the_weights() -> None:
    k, n = 20, 200_000
    w = np.array(mix_weights("zipf:1.1", [str(i) for i in range(k)]))
    counts = np.bincount(models_at(np.arange(n), w.tolist(), 3), minlength=k)
    chi2 = float((((counts - n * w) ** 2) / (n * w)).sum())
    assert chi2 < 43.8  # chi-square, 19 degrees of freedom, p = 0.001


def test_zero_weights_are_never_drawn_and_payloads_cycle_within_a_model() -> None:
    mix = ResolvedMix(("a", "b", "c"), (0.5, 0.0, 0.5), per_model=4)
    pay, models = mix.rows(4000, seed=1)
    assert set(np.unique(models).tolist()) == {0, 2}
    assert np.array_equal(pay // 4, models.astype(np.int64))
    assert np.array_equal(pay % 4, np.arange(4000) % 4)


def test_header_round_trip_and_natural_order() -> None:
    mix = ResolvedMix(("a", "b"), (0.75, 0.25), "zipf:1.585", 8, True)
    assert ResolvedMix.from_header({"mix": mix.describe()}) == mix
    assert ResolvedMix.from_header({}) is None
    assert natural_order(["m-10", "m-2", "m-1", "b"]) == ["b", "m-1", "m-2", "m-10"]
