"""Records: construction, column round trips, selection, shifting, shard merges, derived columns, masks."""

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satpoint.metrics.records import CENSORED, Outcome, Records

NAN = math.nan
COLUMNS = ("intended", "sent", "done", "outcome", "status", "waited", "retried")
DTYPES = {
    "intended": np.float64,
    "sent": np.float64,
    "done": np.float64,
    "outcome": np.int8,
    "status": np.int32,
    "waited": np.bool_,
    "retried": np.bool_,
}


def make(rows: list[tuple[float, float, float, Outcome, int, bool]]) -> Records:
    """Records from (intended, sent, done, outcome, status, waited) rows."""
    return Records(
        intended=np.array([r[0] for r in rows], dtype=np.float64),
        sent=np.array([r[1] for r in rows], dtype=np.float64),
        done=np.array([r[2] for r in rows], dtype=np.float64),
        outcome=np.array([int(r[3]) for r in rows], dtype=np.int8),
        status=np.array([r[4] for r in rows], dtype=np.int32),
        waited=np.array([r[5] for r in rows], dtype=np.bool_),
    )


def assert_same(a: Records, b: Records) -> None:
    """Same rows, same order, same dtypes (NaN equal to NaN)."""
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


# one row per outcome, as the dispatcher records them: the run ended (aborted) at 2.0 s
EVERY_OUTCOME = make(
    [
        (0.0, 0.001, 0.011, Outcome.OK, 200, False),
        (0.1, 0.100, 0.150, Outcome.HTTP_ERROR, 503, False),
        (0.2, 0.200, 1.200, Outcome.TIMEOUT, 0, False),  # done: when the timeout fired
        (0.3, 0.300, 0.301, Outcome.CONN_REFUSED, 0, False),
        (0.4, 0.400, 0.420, Outcome.CONN_RESET, 0, False),
        (0.5, 0.500, 0.530, Outcome.MALFORMED, 200, False),
        (0.6, 0.600, 2.000, Outcome.UNFINISHED, 0, False),  # done: the abort time
        (0.7, NAN, 2.000, Outcome.NOT_SENT, 0, True),  # done: the end of the run
        (0.8, 0.800, 0.840, Outcome.GRPC_ERROR, 14, False),
        (0.9, 0.900, 0.905, Outcome.CONN_ERROR, 0, False),
        (0.95, 0.950, 0.950, Outcome.GENERATOR_RESOURCES, 0, False),
        (0.96, 0.960, 0.990, Outcome.STREAM_BROKEN, 200, False),
        (0.97, 0.970, 0.995, Outcome.STREAM_CUT, 200, False),
        (0.98, 0.980, 0.999, Outcome.STREAM_ERROR, 200, False),
    ]
)


def test_every_outcome_fixture_covers_the_enum() -> None:
    assert sorted(EVERY_OUTCOME.outcome.tolist()) == sorted(int(o) for o in Outcome)


# --- construction and column round trips ------------------------------------------------------


def test_empty_has_one_not_sent_row_per_due_time() -> None:
    rec = Records.empty(np.array([0, 1, 2]))  # ints are converted
    assert len(rec) == 3
    for name, dtype in DTYPES.items():
        assert getattr(rec, name).dtype == dtype, name
        assert getattr(rec, name).shape == (3,), name
    assert rec.intended.tolist() == [0.0, 1.0, 2.0]
    assert np.isnan(rec.sent).all()
    assert np.isnan(rec.done).all()
    assert (rec.outcome == Outcome.NOT_SENT).all()
    assert not rec.status.any()
    assert not rec.waited.any()


def test_empty_of_no_due_times() -> None:
    rec = Records.empty(np.empty(0))
    assert len(rec) == 0
    assert rec.latency_s().shape == (0,)
    assert rec.ok_mask().shape == (0,)


def test_columns_round_trip_through_from_columns() -> None:
    cols = EVERY_OUTCOME.columns()
    assert tuple(cols) == COLUMNS
    assert_same(Records.from_columns(cols), EVERY_OUTCOME)


def test_from_columns_coerces_dtypes() -> None:
    cols: dict[str, npt.NDArray[np.generic]] = {
        "intended": np.array([1, 2], dtype=np.int64),
        "sent": np.array([1.5, NAN], dtype=np.float32),
        "done": np.array([2.0, NAN]),
        "outcome": np.array([0, 7], dtype=np.int64),
        "status": np.array([200, 0], dtype=np.int64),
        "waited": np.array([0, 1], dtype=np.int64),
    }
    rec = Records.from_columns(cols)
    for name, dtype in DTYPES.items():
        assert getattr(rec, name).dtype == dtype, name
    assert rec.outcome.tolist() == [Outcome.OK, Outcome.NOT_SENT]
    assert rec.waited.tolist() == [False, True]
    assert rec.sent[0] == 1.5 and np.isnan(rec.sent[1])


def test_from_columns_needs_every_column() -> None:
    cols = EVERY_OUTCOME.columns()
    del cols["waited"]
    with pytest.raises(KeyError):
        Records.from_columns(cols)


# --- select and shifted ---------------------------------------------------------------------


def test_select_by_mask_index_and_slice() -> None:
    mask = (EVERY_OUTCOME.intended >= 0.75) & (EVERY_OUTCOME.intended < 0.95)
    by_mask = EVERY_OUTCOME.select(mask)
    assert by_mask.outcome.tolist() == [Outcome.GRPC_ERROR, Outcome.CONN_ERROR]
    assert by_mask.status.tolist() == [14, 0]
    by_index = EVERY_OUTCOME.select(np.array([9, 0]))
    assert by_index.outcome.tolist() == [Outcome.CONN_ERROR, Outcome.OK]
    assert by_index.done.tolist() == [0.905, 0.011]
    by_slice = EVERY_OUTCOME.select(slice(6, 8))
    assert by_slice.outcome.tolist() == [Outcome.UNFINISHED, Outcome.NOT_SENT]
    assert by_slice.waited.tolist() == [False, True]
    for name in COLUMNS:  # a slice is a view, a mask a copy
        assert np.shares_memory(getattr(by_slice, name), getattr(EVERY_OUTCOME, name)), name
        assert not np.shares_memory(getattr(by_mask, name), getattr(EVERY_OUTCOME, name)), name


def test_shifted_moves_the_three_timestamps_only() -> None:
    rec = EVERY_OUTCOME
    before = Records.from_columns({k: v.copy() for k, v in rec.columns().items()})
    moved = rec.shifted(100.0)
    assert np.array_equal(moved.intended, rec.intended + 100.0)
    assert np.array_equal(moved.sent, rec.sent + 100.0, equal_nan=True)
    assert np.array_equal(moved.done, rec.done + 100.0, equal_nan=True)
    assert np.isnan(moved.sent[7])  # never sent stays never sent
    assert np.array_equal(moved.outcome, rec.outcome)
    assert np.array_equal(moved.status, rec.status)
    assert np.array_equal(moved.waited, rec.waited)
    # durations do not depend on the clock's origin
    assert np.allclose(moved.latency_s(), rec.latency_s(), equal_nan=True)
    assert np.allclose(moved.service_s(), rec.service_s(), equal_nan=True)
    assert np.allclose(moved.send_lag_s(), rec.send_lag_s(), equal_nan=True)
    assert_same(rec, before)  # the original is untouched


# --- merge of shards ------------------------------------------------------------------------

_row = st.tuples(
    st.floats(min_value=1e-6, max_value=1.0),  # gap to the previous due time (strictly increasing)
    st.one_of(st.none(), st.floats(min_value=0.0, max_value=0.5)),  # send lag, None = never sent
    st.one_of(st.none(), st.floats(min_value=0.0, max_value=5.0)),  # time to done, None = NaN
    st.sampled_from(list(Outcome)),
    st.integers(min_value=0, max_value=599),
    st.booleans(),
)


def _records(rows: list[tuple[float, float | None, float | None, Outcome, int, bool]]) -> Records:
    intended = np.cumsum([r[0] for r in rows]) if rows else np.empty(0)
    out = []
    for t, (_, lag, dur, oc, status, waited) in zip(intended.tolist(), rows, strict=True):
        sent = NAN if lag is None else t + lag
        done = NAN if dur is None else t + dur
        out.append((t, sent, done, oc, status, waited))
    return make(out) if out else Records.empty(np.empty(0))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_row, max_size=60), k=st.integers(min_value=1, max_value=7), rotate=st.integers(0, 6))
def test_merging_the_n_mod_k_split_gives_back_the_rows_in_intended_order(
    rows: list[tuple[float, float | None, float | None, Outcome, int, bool]], k: int, rotate: int
) -> None:
    rec = _records(rows)
    n = len(rec)
    shards = [rec.select(np.arange(j, n, k)) for j in range(k)]  # how the runner splits a schedule
    r = rotate % k
    shards = shards[r:] + shards[:r]  # the order shards report back in does not matter
    assert_same(Records.merge(shards), rec)


def test_merge_of_one_shard_is_that_shard() -> None:
    assert Records.merge([EVERY_OUTCOME]) is EVERY_OUTCOME


def test_merge_interleaves_shards_by_intended_time() -> None:
    a = make([(0.0, 0.0, 0.1, Outcome.OK, 200, False), (0.2, 0.2, 0.3, Outcome.TIMEOUT, 0, False)])
    b = make([(0.1, 0.1, 0.2, Outcome.HTTP_ERROR, 500, True), (0.3, NAN, 1.0, Outcome.NOT_SENT, 0, True)])
    m = Records.merge([b, a])
    assert m.intended.tolist() == [0.0, 0.1, 0.2, 0.3]
    assert m.outcome.tolist() == [Outcome.OK, Outcome.HTTP_ERROR, Outcome.TIMEOUT, Outcome.NOT_SENT]
    assert m.status.tolist() == [200, 500, 0, 0]
    assert m.waited.tolist() == [False, True, False, True]
    assert m.done.tolist() == [0.1, 0.2, 0.3, 1.0]


def test_merge_keeps_ties_in_shard_order() -> None:
    # equal due times in two shards: the sort is stable, so rows keep the order of the list of parts
    a = make([(1.0, 1.0, 1.1, Outcome.OK, 200, False)])
    b = make([(1.0, 1.0, 1.2, Outcome.HTTP_ERROR, 500, False)])
    assert Records.merge([a, b]).status.tolist() == [200, 500]
    assert Records.merge([b, a]).status.tolist() == [500, 200]


# --- derived columns ------------------------------------------------------------------------


def test_latency_service_and_send_lag() -> None:
    rec = make(
        [
            (1.0, 1.25, 1.75, Outcome.OK, 200, False),  # late by 0.25 s, served in 0.5 s
            (2.0, 2.0, 2.5, Outcome.OK, 200, False),
            (3.0, NAN, 5.0, Outcome.NOT_SENT, 0, True),  # never left; waited until the end at 5 s
            (4.0, 4.5, NAN, Outcome.CONN_ERROR, 0, False),
        ]
    )
    assert np.array_equal(rec.latency_s(), [0.75, 0.5, 2.0, NAN], equal_nan=True)  # done - intended
    assert np.array_equal(rec.service_s(), [0.5, 0.5, NAN, NAN], equal_nan=True)  # done - sent
    assert np.array_equal(rec.send_lag_s(), [0.25, 0.0, NAN, 0.5], equal_nan=True)  # sent - intended
    # latency = send lag + service time wherever all three are known
    assert np.allclose(rec.latency_s()[:2], rec.send_lag_s()[:2] + rec.service_s()[:2])


# --- masks ----------------------------------------------------------------------------------

# outcome -> (ok, censored, error, counts in latency, finished when done is set)
MASK_TABLE = {
    Outcome.OK: (True, False, False, True, True),
    Outcome.HTTP_ERROR: (False, False, True, False, True),
    Outcome.TIMEOUT: (False, True, True, True, True),
    Outcome.CONN_REFUSED: (False, False, True, False, True),
    Outcome.CONN_RESET: (False, False, True, False, True),
    Outcome.MALFORMED: (False, False, True, False, True),
    Outcome.UNFINISHED: (False, True, False, True, False),
    Outcome.NOT_SENT: (False, True, False, True, False),
    Outcome.GRPC_ERROR: (False, False, True, False, True),
    Outcome.CONN_ERROR: (False, False, True, False, True),
    Outcome.GENERATOR_RESOURCES: (False, False, True, False, True),
    Outcome.STREAM_BROKEN: (False, False, True, False, True),
    Outcome.STREAM_CUT: (False, False, True, False, True),
    Outcome.STREAM_ERROR: (False, False, True, False, True),
}


def test_mask_table_covers_every_outcome() -> None:
    assert set(MASK_TABLE) == set(Outcome)
    assert {o for o, row in MASK_TABLE.items() if row[1]} == set(CENSORED)


@pytest.mark.parametrize("outcome", list(Outcome), ids=lambda o: o.name)
@pytest.mark.parametrize("done", [0.5, NAN], ids=["done", "no-done"])
def test_masks_of_one_row(outcome: Outcome, done: float) -> None:
    rec = make([(0.0, 0.0, done, outcome, 0, False)])
    ok, censored, error, latency, finished = MASK_TABLE[outcome]
    assert rec.ok_mask().tolist() == [ok]
    assert rec.censored_mask().tolist() == [censored]
    assert rec.error_mask().tolist() == [error]
    assert rec.latency_mask().tolist() == [latency]
    assert rec.finished_mask().tolist() == [finished and not math.isnan(done)]


def test_masks_on_every_outcome() -> None:
    rec = EVERY_OUTCOME
    for mask in (rec.ok_mask(), rec.censored_mask(), rec.finished_mask(), rec.error_mask(), rec.latency_mask()):
        assert mask.dtype == np.bool_
        assert mask.shape == (len(rec),)

    def outcomes(mask: npt.NDArray[np.bool_]) -> set[Outcome]:
        return {Outcome(int(o)) for o in rec.outcome[mask]}

    errors = {
        Outcome.HTTP_ERROR,
        Outcome.TIMEOUT,
        Outcome.CONN_REFUSED,
        Outcome.CONN_RESET,
        Outcome.MALFORMED,
        Outcome.GRPC_ERROR,
        Outcome.CONN_ERROR,
        Outcome.GENERATOR_RESOURCES,
        Outcome.STREAM_BROKEN,
        Outcome.STREAM_CUT,
        Outcome.STREAM_ERROR,
    }
    assert outcomes(rec.ok_mask()) == {Outcome.OK}
    assert outcomes(rec.censored_mask()) == {Outcome.TIMEOUT, Outcome.UNFINISHED, Outcome.NOT_SENT}
    assert outcomes(rec.error_mask()) == errors
    assert outcomes(rec.latency_mask()) == {Outcome.OK, Outcome.TIMEOUT, Outcome.UNFINISHED, Outcome.NOT_SENT}
    # unfinished and never-sent rows hold a done time (abort / end of run) and still are not finished
    assert not np.isnan(rec.done[rec.censored_mask()]).any()
    assert outcomes(rec.finished_mask()) == errors | {Outcome.OK}
    # every row is OK, an error, or one of the two the run gave up on -- exactly one of them
    gave_up = np.isin(rec.outcome, [Outcome.UNFINISHED, Outcome.NOT_SENT])
    assert (rec.ok_mask().astype(int) + rec.error_mask() + gave_up == 1).all()


def test_finished_mask_needs_a_done_time() -> None:
    rec = make(
        [
            (0.0, 0.0, 0.1, Outcome.CONN_RESET, 0, False),
            (0.1, 0.1, NAN, Outcome.CONN_RESET, 0, False),  # an error without a done time
            (0.2, NAN, NAN, Outcome.NOT_SENT, 0, False),  # never reached
        ]
    )
    assert rec.finished_mask().tolist() == [True, False, False]
    assert rec.error_mask().tolist() == [True, True, False]  # an error whether or not it has a done time
