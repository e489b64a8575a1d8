"""One round of messages: every request ends as ok / refused / failed with a reason."""

from __future__ import annotations

import time

from flwr.app import ConfigRecord, Message, RecordDict

from server import protocol as p
from server.exchange import Request, exchange, exchange_requests, wait_for_nodes
from tests.server.fakes import FakeGrid, flower_error, reply_with, silent


def _error(kind: str, status: str) -> RecordDict:
    return RecordDict({p.ERROR: ConfigRecord({"type": kind, "message": "why", "status": status})})


def test_each_kind_of_reply_is_classified() -> None:
    grid = FakeGrid({
        1: reply_with(RecordDict({"x": ConfigRecord({"a": 1})})),
        2: reply_with(_error("SignatureError", p.REFUSED)),
        3: flower_error(2, "boom"),
        4: silent(),
        5: reply_with(_error("ValueError", p.FAILED)),
    })
    started = time.monotonic()
    replies = exchange(grid, {n: RecordDict() for n in range(1, 6)}, p.ENCODE, timeout=0.3)
    assert time.monotonic() - started < 3
    assert replies[1].ok and replies[1].content is not None
    assert (replies[2].status, replies[2].error_type) == (p.REFUSED, "SignatureError")
    assert (replies[3].status, replies[3].error_type) == (p.FAILED, "ClientAppRaised")
    assert "boom" in replies[3].reason
    assert (replies[4].status, replies[4].error_type) == (p.FAILED, "Timeout")
    assert "0.3 s" in replies[4].reason
    assert replies[5].status == p.FAILED


def test_messages_carry_type_group_and_a_ttl_past_the_wait() -> None:
    grid = FakeGrid({7: reply_with(RecordDict())})
    exchange(grid, {7: RecordDict()}, p.FEDAVG, timeout=10, group_id="fedavg-1")
    (sent,) = grid.sent
    assert sent.metadata.message_type == p.FEDAVG
    assert sent.metadata.group_id == "fedavg-1"
    assert sent.metadata.dst_node_id == 7
    assert sent.metadata.ttl > 10


def test_superlink_made_errors_are_matched_by_message_id() -> None:
    """A SuperLink error reply has src_node_id 1, not the node's: match it by reply_to."""

    def superlink_error(message: Message) -> Message:
        from flwr.app import Error

        reply = Message(Error(code=5, reason="node unavailable"), reply_to=message)
        reply.metadata.__dict__["_src_node_id"] = 1
        return reply

    grid = FakeGrid({42: superlink_error})
    replies = exchange(grid, {42: RecordDict()}, p.ENCODE, timeout=1)
    assert replies[42].error_type == "NodeUnavailable"


def test_per_request_deadlines() -> None:
    """A short-deadline request times out without waiting for the long one, and vice versa."""
    grid = FakeGrid({1: silent(), 2: reply_with(RecordDict())})
    started = time.monotonic()
    replies = exchange_requests(grid, {
        1: Request(p.ENCODE, RecordDict(), 0.2),
        2: Request(p.AUDIT, RecordDict(), 30.0),
    })
    assert time.monotonic() - started < 3
    assert replies[1].error_type == "Timeout" and replies[2].ok


def test_wait_for_nodes_returns_what_is_there_after_the_timeout() -> None:
    grid = FakeGrid({3: silent(), 1: silent()})
    assert wait_for_nodes(grid, expected=2, timeout=0) == [1, 3]
    started = time.monotonic()
    assert wait_for_nodes(grid, expected=5, timeout=0.2, poll=0.05) == [1, 3]
    assert time.monotonic() - started >= 0.2


def test_runtime_failures_are_retried_but_app_errors_are_not() -> None:
    """Flower error 0 (the runtime lost the task, e.g. a dead simulation worker) is re-sent;
    an error the ClientApp raised (code 2) or replied is final."""
    from flwr.app import Error

    calls = {1: 0, 2: 0, 3: 0}

    def flaky(nid: int, code: int, recover_after: int | None):
        def respond(message: Message) -> Message:
            calls[nid] += 1
            if recover_after is None or calls[nid] <= recover_after:
                return Message(Error(code=code, reason="actor restarting"), reply_to=message)
            return Message(RecordDict(), reply_to=message)
        return respond

    grid = FakeGrid({1: flaky(1, 0, 1), 2: flaky(2, 2, 1), 3: flaky(3, 0, None)})
    replies = exchange_requests(
        grid, {n: Request(p.ENCODE, RecordDict(), 10) for n in (1, 2, 3)}, max_attempts=3)
    assert replies[1].ok and calls[1] == 2
    assert replies[2].error_type == "ClientAppRaised" and calls[2] == 1
    assert replies[3].status == p.FAILED and calls[3] == 3
    assert "after 3 attempts" in replies[3].reason
