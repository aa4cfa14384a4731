"""The confirmation gate: what the live synced is confirmed once every in-sync backup
acked it, min_in_sync copies hold it, and the live may still confirm."""

from __future__ import annotations

from chute.ha.gate import Gate


class Calls:
    def __init__(self) -> None:
        self.confirmed: list[str] = []

    def callback(self, name: str):  # type: ignore[no-untyped-def]
        def done(error: BaseException | None) -> None:
            assert error is None
            self.confirmed.append(name)

        return done


def test_without_backups_the_live_alone_confirms_at_once() -> None:
    calls = Calls()
    gate = Gate(1, lambda: True)
    gate.submit([calls.callback("a")], 100)
    assert calls.confirmed == ["a"]


def test_an_in_sync_backup_holds_confirmations_until_it_acks_past_them() -> None:
    calls = Calls()
    gate = Gate(1, lambda: True)
    assert gate.join("b", 0)
    gate.submit([calls.callback("a")], 100)
    gate.submit([calls.callback("c")], 200)
    assert calls.confirmed == []
    gate.acked("b", 150)
    assert calls.confirmed == ["a"]
    gate.acked("b", 200)
    assert calls.confirmed == ["a", "c"]


def test_a_backup_joins_only_once_it_acked_everything_handed_in() -> None:
    calls = Calls()
    gate = Gate(1, lambda: True)
    gate.submit([calls.callback("a")], 100)
    assert not gate.join("b", 50)
    assert gate.in_sync == []
    assert gate.join("b", 100)
    assert gate.in_sync == ["b"]


def test_a_backup_that_leaves_releases_what_waited_for_it() -> None:
    calls = Calls()
    gate = Gate(1, lambda: True)
    gate.join("b", 0)
    gate.submit([calls.callback("a")], 100)
    gate.leave("b")
    assert calls.confirmed == ["a"]


def test_min_in_sync_waits_for_enough_copies() -> None:
    calls = Calls()
    gate = Gate(2, lambda: True)
    gate.submit([calls.callback("a")], 100)
    assert calls.confirmed == []
    assert gate.join("b", 100)
    gate.recheck()
    assert calls.confirmed == ["a"]


def test_a_live_that_may_not_confirm_confirms_nothing() -> None:
    calls = Calls()
    allowed = [False]
    gate = Gate(1, lambda: allowed[0])
    gate.submit([calls.callback("a")], 100)
    gate.acked("b", 1000)
    assert calls.confirmed == []
    allowed[0] = True
    gate.recheck()
    assert calls.confirmed == ["a"]


def test_confirmations_keep_their_order() -> None:
    calls = Calls()
    allowed = [False]
    gate = Gate(1, lambda: allowed[0])
    gate.submit([calls.callback("a")], 100)
    allowed[0] = True
    gate.submit([calls.callback("b")], 50)  # behind a held one: waits for it
    assert calls.confirmed == []
    gate.recheck()
    assert calls.confirmed == ["a", "b"]


def test_behind_names_the_in_sync_backups_a_confirmation_waits_for() -> None:
    gate = Gate(1, lambda: True)
    gate.join("b", 0)
    gate.join("c", 0)
    gate.submit([], 100)
    gate.acked("c", 100)
    assert gate.behind(0.0) == ["b"]
    assert gate.behind(60.0) == []
