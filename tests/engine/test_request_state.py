"""The tensor request's state machine (engine/request_state.py), pure: every move the
worker makes, the ones it must never make, and the deadline rule, with time an argument."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podserve.engine.request_state import InvalidTransition, RequestState, RequestTrack

S = RequestState


def state(track: RequestTrack) -> RequestState:
    """Read afresh: mypy would otherwise keep a narrowed state across moves."""
    return track.state


def test_the_happy_path() -> None:
    track = RequestTrack(enqueued_s=10.0, deadline_s=12.0)
    assert state(track) is S.QUEUED
    assert track.state.waiting
    track.stage()
    assert state(track) is S.STAGED
    assert track.state.waiting
    assert track.start(11.0)
    assert track.state is S.RUNNING
    assert not track.state.waiting
    track.finish()
    assert track.state is S.DONE
    assert track.state.final
    assert track.waited_s(11.5) == 1.5


def test_a_deadline_that_passed_before_the_start_expires_the_request() -> None:
    track = RequestTrack(enqueued_s=0.0, deadline_s=1.0)
    track.stage()
    assert not track.start(1.0)  # at the deadline is past it
    assert track.state is S.EXPIRED


def test_the_timer_expires_only_waiting_requests_past_their_deadline() -> None:
    early = RequestTrack(enqueued_s=0.0, deadline_s=5.0)
    assert not early.expire(4.9)
    assert state(early) is S.QUEUED
    assert early.expire(5.0)
    assert state(early) is S.EXPIRED
    running = RequestTrack(enqueued_s=0.0, deadline_s=5.0)
    running.stage()
    assert running.start(1.0)
    assert not running.expire(9.0)  # computing: its result stands
    assert running.state is S.RUNNING
    no_deadline = RequestTrack(enqueued_s=0.0)
    assert not no_deadline.expire(1e9)


def test_a_client_that_leaves_takes_a_waiting_request_out_but_not_a_running_one() -> None:
    queued = RequestTrack(enqueued_s=0.0)
    assert queued.abandon()
    assert queued.state is S.ABANDONED
    staged = RequestTrack(enqueued_s=0.0)
    staged.stage()
    assert staged.abandon()
    assert not staged.start(1.0)  # the thread skips it
    assert staged.state is S.ABANDONED
    running = RequestTrack(enqueued_s=0.0)
    running.stage()
    running.start(0.0)
    assert not running.abandon()
    assert running.state is S.RUNNING


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([], "finish"),  # a queued request was never computed
        (["stage"], "stage"),  # staged twice
        (["stage", "start", "finish"], "stage"),  # back from the end
        (["stage", "start"], "stage"),
    ],
)
def test_illegal_moves_raise(path: list[str], bad: str) -> None:
    track = RequestTrack(enqueued_s=0.0)
    for move in path:
        if move == "start":
            track.start(0.0)
        else:
            getattr(track, move)()
    with pytest.raises(InvalidTransition):
        getattr(track, bad)()


MOVES = st.lists(st.sampled_from(["stage", "start", "expire", "abandon", "finish"]), max_size=8)


@given(MOVES, st.floats(0, 10), st.one_of(st.none(), st.floats(0, 10)))
def test_final_states_never_move_and_only_running_finishes(
    moves: list[str], now_s: float, deadline_s: float | None
) -> None:
    track = RequestTrack(enqueued_s=0.0, deadline_s=deadline_s)
    for move in moves:
        before = track.state
        try:
            if move in ("start", "expire"):
                getattr(track, move)(now_s)
            else:
                getattr(track, move)()
        except InvalidTransition:
            assert track.state is before  # a refused move changes nothing
            continue
        if before.final:
            assert track.state is before
        if track.state is S.DONE:
            assert before in (S.RUNNING, S.DONE)
        if track.state is S.RUNNING and before is not S.RUNNING:
            assert deadline_s is None or now_s < deadline_s  # never started past its deadline
