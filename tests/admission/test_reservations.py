"""Queue slots promised before a body is read: never more promised plus queued than the
bound, so a request admitted from its URL always finds its slot when it arrives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podserve.admission import QueueReservations, Reservation


def test_slots_run_out_at_the_bound_counting_the_queue() -> None:
    slots = QueueReservations()
    first = slots.reserve("m/1", queued=1, limit=3)
    second = slots.reserve("m/1", queued=1, limit=3)
    assert first is not None
    assert second is not None
    assert slots.held("m/1") == 2
    assert slots.full("m/1", queued=1, limit=3)
    assert slots.reserve("m/1", queued=1, limit=3) is None
    assert slots.held("m/1") == 2  # a refusal promises nothing


def test_a_release_frees_the_slot_once() -> None:
    slots = QueueReservations()
    reservation = slots.reserve("m/1", queued=0, limit=1)
    assert reservation is not None
    assert reservation.held
    assert slots.reserve("m/1", queued=0, limit=1) is None
    reservation.release()
    reservation.release()  # the edge's `finally` after the data plane released it
    assert not reservation.held
    assert slots.held("m/1") == 0
    assert slots.reserve("m/1", queued=0, limit=1) is not None


def test_queues_are_counted_apart() -> None:
    slots = QueueReservations()
    assert slots.reserve("a/1", queued=0, limit=1) is not None
    assert slots.reserve("a/2", queued=0, limit=1) is not None
    assert slots.reserve("b/1", queued=0, limit=1) is not None
    assert slots.reserve("a/1", queued=0, limit=1) is None


# One request's life: it arrives (reserve, or is refused), then either enters the queue
# (release, queued + 1: the queue's own bound check must pass) or fails before it
# (release only); queued requests leave as batches run.
ARRIVE, ENTER, FAIL, RUN = range(4)


@given(
    limit=st.integers(min_value=1, max_value=6),
    steps=st.lists(st.tuples(st.sampled_from((ARRIVE, ENTER, FAIL, RUN)), st.integers(0, 50))),
)
def test_an_admitted_request_always_finds_its_slot(
    limit: int, steps: list[tuple[int, int]]
) -> None:
    slots = QueueReservations()
    queued = 0
    admitted: list[Reservation] = []  # reading or decoding their bodies
    for action, pick in steps:
        if action == ARRIVE:
            reservation = slots.reserve("m/1", queued, limit)
            if reservation is None:
                assert queued + len(admitted) == limit
            else:
                admitted.append(reservation)
        elif action in (ENTER, FAIL) and admitted:
            reservation = admitted.pop(pick % len(admitted))
            reservation.release()
            if action == ENTER:
                assert queued < limit  # the queue's own check (the late refusal) passes
                queued += 1
        elif action == RUN and queued:
            queued -= 1
        assert queued + slots.held("m/1") <= limit
        assert slots.held("m/1") == len(admitted)
