"""One request/reply round with a set of nodes, with every missing or failed reply accounted for.

``grid.send_and_receive(msgs, timeout=T)`` returns whatever arrived by ``T`` and silently drops the
rest, with one timeout for all; a reply made by the SuperLink (node unavailable, message expired)
carries ``src_node_id == 1`` rather than the node's id. So a run that must "complete with the rest
and say who failed and why" cannot iterate over the replies it got: it starts from the requests it
sent (pushed with ``grid.push_messages``), pulls replies with ``grid.pull_messages`` until each
request is answered or past its own deadline, matches each reply to its request by
``reply_to_message_id``, and records a reason for every request left unanswered.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from server import protocol

log = logging.getLogger(__name__)

#: Flower's error codes (flwr.common.constant.ErrorCode) in words, for summary.json.
FLOWER_ERRORS = {
    0: "UnknownError",
    1: "LoadClientAppError",
    2: "ClientAppRaised",
    3: "MessageExpired",
    4: "ReplyTtlExpired",
    5: "NodeUnavailable",
    8: "ClientAppStoppedResponding",
}

#: Grace added to a message's TTL over the wait, so a reply that arrives just in time is valid.
TTL_GRACE_S = 30.0


@dataclass
class Reply:
    """What one node answered (or why it did not).

    ``status`` is ``ok`` (content present, no error record), ``refused`` (the node declined on
    purpose: bad signature, unknown key, rollback, schema or data mismatch) or ``failed`` (it
    raised, timed out, or is gone). ``error_type`` and ``reason`` say why when not ``ok``.
    """

    node_id: int
    status: str
    content: RecordDict | None = None
    error_type: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == protocol.OK


def wait_for_nodes(grid: Grid, expected: int, timeout: float, poll: float = 0.5) -> list[int]:
    """Node ids once ``expected`` nodes are connected, or whatever is there after ``timeout``.

    In simulation every node is registered before the ServerApp starts; in a deployment SuperNodes
    connect one by one, and a run that starts before they are all there would skip a site.
    """
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= expected or time.monotonic() >= deadline:
            return nodes
        time.sleep(poll)


@dataclass(frozen=True)
class Request:
    """One message to one node: its type, its content, and how long to wait for the reply."""

    message_type: str
    content: RecordDict
    timeout: float


def exchange(
    grid: Grid,
    requests: Mapping[int, RecordDict],
    message_type: str,
    *,
    timeout: float,
    group_id: str = "",
) -> dict[int, Reply]:
    """Send ``requests[node_id]`` (all of one type) and return one :class:`Reply` per node."""
    return exchange_requests(
        grid,
        {nid: Request(message_type, content, timeout) for nid, content in requests.items()},
        group_id=group_id,
    )


#: Flower's "unknown" error: the runtime failed to run the task (e.g. the simulation's worker
#: process was lost and is being restarted), as opposed to the ClientApp raising (2) or replying.
TRANSIENT_CODES = frozenset({0})
MAX_ATTEMPTS = 8
#: Pause before re-sending: 1, 2, 4, 8, then every 10 s (a restarting worker re-imports torch).
MAX_PAUSE_S = 10.0


def exchange_requests(
    grid: Grid,
    requests: Mapping[int, Request],
    *,
    group_id: str = "",
    poll_min: float = 0.05,
    poll_max: float = 0.25,
    max_attempts: int = MAX_ATTEMPTS,
) -> dict[int, Reply]:
    """Push every request at once, then pull until each is answered or past its own timeout.

    Per-request deadlines let different tasks share one round (the hospitals encode while the
    auditor audits) without a slow audit stretching the hospitals' deadline or the reverse.
    Replies are matched to requests by message id (so SuperLink-made error replies land on the
    right node); a request still unanswered at its deadline becomes ``failed`` with a reason.

    A request that failed in the runtime itself (Flower error code 0, not the app's own error)
    is sent again, up to ``max_attempts`` times within its deadline, after a short pause: every
    task here is idempotent, and a site must not be dropped because the worker that happened to
    run its task died with another site's. What the app itself answered is never retried.
    """
    if not requests:
        return {}
    started = time.monotonic()
    deadline = {nid: started + r.timeout for nid, r in requests.items()}
    attempts: dict[int, int] = dict.fromkeys(requests, 0)
    pending: dict[str, int] = {}
    retry_at: dict[int, float] = {}
    last: dict[int, Reply] = {}
    out: dict[int, Reply] = {}

    def push(node_ids: list[int]) -> None:
        messages = [
            Message(requests[nid].content, nid, requests[nid].message_type, group_id=group_id,
                    ttl=max(deadline[nid] - time.monotonic(), 1.0) + TTL_GRACE_S)
            for nid in node_ids
        ]
        pushed = [str(m) if m else "" for m in grid.push_messages(messages)]
        # Flower returns the ids in the order of the messages ("" / None for one it could not
        # push); it also stamps each message's metadata, the fallback if the list is shorter.
        aligned = len(pushed) == len(messages)
        stamped = set(pushed)
        for i, (nid, message) in enumerate(zip(node_ids, messages, strict=True)):
            attempts[nid] += 1
            message_id = pushed[i] if aligned else message.metadata.message_id
            if message_id and (aligned or message_id in stamped):
                pending[message_id] = nid
            else:
                out[nid] = Reply(nid, protocol.FAILED, error_type="PushFailed",
                                 reason=f"the {requests[nid].message_type} message could not "
                                        "be sent")

    push(list(requests))
    poll = poll_min
    while pending or retry_at:
        for reply in grid.pull_messages(list(pending)) if pending else []:
            nid = pending.pop(reply.metadata.reply_to_message_id, None)
            if nid is None:
                log.warning("ignoring an unexpected reply from node %s",
                            reply.metadata.src_node_id)
                continue
            got = interpret(nid, reply)
            pause = min(float(2 ** (attempts[nid] - 1)), MAX_PAUSE_S)
            if (reply.has_error() and int(reply.error.code) in TRANSIENT_CODES
                    and attempts[nid] < max_attempts
                    and time.monotonic() + pause < deadline[nid]):
                last[nid] = got
                retry_at[nid] = time.monotonic() + pause
                log.info("node %s: %s; sending the task again in %.0f s", nid, got.reason, pause)
            else:
                out[nid] = _with_attempts(got, attempts[nid])
        now = time.monotonic()
        due = [nid for nid, at in retry_at.items() if now >= at]
        for nid in due:
            del retry_at[nid]
        if due:
            push(due)
        for message_id in [m for m, nid in pending.items() if now >= deadline[nid]]:
            nid = pending.pop(message_id)
            request = requests[nid]
            out[nid] = _with_attempts(Reply(
                node_id=nid,
                status=protocol.FAILED,
                error_type="Timeout",
                reason=(
                    f"no reply to {request.message_type} within {request.timeout:g} s: "
                    "the node timed out or was lost"
                ),
            ), attempts[nid])
        if pending or retry_at:
            time.sleep(poll)
            poll = min(poll * 1.5, poll_max)
    return out


def _with_attempts(reply: Reply, attempts: int) -> Reply:
    if attempts > 1 and not reply.ok:
        reply.reason = f"{reply.reason} (after {attempts} attempts)"
    return reply


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPED = re.compile(r"^<class '([^']+)'>:<'(.*)$", re.S)
MAX_REASON = 300


def short_reason(text: str) -> str:
    """Flower's error reasons carry whole remote tracebacks; keep the line that says what broke
    (the exception's own message), without terminal colours, at most ``MAX_REASON`` characters."""
    text = _ANSI.sub("", str(text)).strip()
    wrapped = _WRAPPED.match(text)  # "<class 'pkg.ErrorType'>:<'message'>" (Flower's format)
    if wrapped:
        kind = wrapped.group(1).split("(")[0].rsplit(".", 1)[-1]
        text = f"{kind}: {wrapped.group(2)}"
    if "Message:" in text:
        text = text.rsplit("Message:", 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Error" in line or "died" in line or "rror:" in line:
            text = line
            break
    else:
        text = lines[0] if lines else ""
    text = text.strip("<>'\" ")
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def interpret(node_id: int, reply: Message) -> Reply:
    """Turn a reply message into a :class:`Reply` (Flower error, error record, or content)."""
    if reply.has_error():
        code = int(reply.error.code)
        name = FLOWER_ERRORS.get(code, f"FlowerError{code}")
        return Reply(
            node_id=node_id,
            status=protocol.FAILED,
            error_type=name,
            reason=f"Flower error {code}: {short_reason(reply.error.reason)}",
        )
    if not reply.has_content():
        return Reply(node_id, protocol.FAILED, error_type="EmptyReply", reason="empty reply")
    content = reply.content
    if protocol.ERROR in content.config_records:
        record = content.config_records[protocol.ERROR]
        status = str(record.get("status", protocol.FAILED))
        if status not in (protocol.REFUSED, protocol.FAILED):
            status = protocol.FAILED
        return Reply(
            node_id=node_id,
            status=status,
            content=content,
            error_type=str(record.get("type", "Error")),
            reason=str(record.get("message", "")),
        )
    return Reply(node_id=node_id, status=protocol.OK, content=content)


__all__ = [
    "FLOWER_ERRORS",
    "Reply",
    "Request",
    "exchange",
    "exchange_requests",
    "interpret",
    "short_reason",
    "wait_for_nodes",
]
