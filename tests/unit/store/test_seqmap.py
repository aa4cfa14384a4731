"""SeqMap behaves as the dict it replaces, for any sequence of operations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.store.seqmap import SeqMap

# seqs mostly near each other (a queue), sometimes far away (gaps) or behind (late commits)
seqs = st.one_of(st.integers(1, 300), st.integers(1, 20_000), st.integers(1, 1 << 40))
ops = st.lists(
    st.tuples(st.sampled_from(["set", "pop"]), seqs, st.integers(1, 1 << 60)), max_size=300
)


@settings(max_examples=300)
@given(ops)
def test_matches_a_dict(steps: list[tuple[str, int, int]]) -> None:
    model: dict[int, int] = {}
    m = SeqMap()
    for op, seq, location in steps:
        if op == "set":
            model[seq] = location
            m[seq] = location
        else:
            assert m.pop(seq) == model.pop(seq, None)
        assert len(m) == len(model)
    assert dict(m.items()) == model
    assert sorted(m.values()) == sorted(model.values())
    for probe in [*model, 0, 7, 1 << 41]:
        assert m.get(probe) == model.get(probe)
        assert (probe in m) == (probe in model)
    for after in [0, *list(model)[:5]]:
        expected = sorted((s, v) for s, v in model.items() if s > after)
        assert list(m.after(after)) == expected
        for limit in (1, 3, 50, 1000):
            window = expected[:limit]
            assert m.window(after, limit) == ([s for s, _ in window], [v for _, v in window])


def test_fifo_use_stays_compact() -> None:
    m = SeqMap()
    for seq in range(1, 200_001):
        m[seq] = seq + 100
        if seq > 1000:
            m.pop(seq - 1000)
    assert len(m) == 1000
    assert list(m.after(199_998)) == [(199_999, 200_099), (200_000, 200_100)]
    assert len(m._slots) < 20_000  # the consumed prefix was trimmed


def test_a_location_of_zero_is_refused() -> None:
    m = SeqMap()
    with pytest.raises(ValueError, match="positive"):
        m[1] = 0


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 50)), max_size=30))
def test_a_run_appended_at_once_is_the_same_as_each_set(runs: list[tuple[int, int]]) -> None:
    model: dict[int, int] = {}
    m = SeqMap()
    seq = 1
    for gap, count in runs:
        seq += gap  # after a gap the run is refused, and set one by one
        location = seq * 10
        if not m.append_run(seq, count, location):
            for k in range(seq, seq + count):
                m[k] = location
        for k in range(seq, seq + count):
            model[k] = location
        seq += count
        assert dict(m.items()) == model
        assert len(m) == len(model)
