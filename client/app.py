"""The ClientApp every institution runs: one Flower handler per task, thin over client/handlers.

The node's role (``hospital`` or ``audit``) and everything about its data come from its own
``node_config``, read once per message into :class:`client.config.NodeConfig`; the handler for
the task does the work. Any failure — a refused bundle, a bad table, a bug — becomes an *error
reply* saying what went wrong, so the coordinator can record the site's status and go on with
the others instead of receiving Flower's bare "ClientApp raised" error.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from client import protocol as p
from client.config import NodeConfig
from client.handlers import (
    error_content,
    handle_audit,
    handle_discover,
    handle_encode,
    handle_fedavg,
    handle_site_audit,
)

Handler = Callable[[RecordDict, NodeConfig], RecordDict]

app = ClientApp()


def respond(msg: Message, context: Context, handler: Handler) -> Message:
    """Run ``handler`` on the message content with this node's config; errors → error reply."""
    node: NodeConfig | None = None
    try:
        node = NodeConfig.from_node_config(context.node_config)
        content = handler(msg.content if msg.has_content() else RecordDict(), node)
    except Exception as exc:  # every failure is reported, never raised into Flower
        content = error_content(exc, node)
        if node is None:  # a broken node_config: still say which site, if it says so
            name = context.node_config.get("site-name")
            if isinstance(name, str) and name.strip():
                content.config_records[p.ERROR]["site-name"] = name.strip()
    return Message(content, reply_to=msg)


@app.query("discover")
def discover(msg: Message, context: Context) -> Message:
    return respond(msg, context, handle_discover)


@app.query("encode")
def encode(msg: Message, context: Context) -> Message:
    return respond(msg, context, handle_encode)


@app.evaluate("audit")
def audit(msg: Message, context: Context) -> Message:
    return respond(msg, context, handle_audit)


@app.evaluate("site_audit")
def site_audit(msg: Message, context: Context) -> Message:
    return respond(msg, context, handle_site_audit)


@app.train("fedavg")
def fedavg(msg: Message, context: Context) -> Message:
    return respond(msg, context, handle_fedavg)


#: Message type → the function registered for it (tests check it covers the protocol).
ROUTES = {
    p.DISCOVER: discover,
    p.ENCODE: encode,
    p.AUDIT: audit,
    p.SITE_AUDIT: site_audit,
    p.FEDAVG: fedavg,
}

__all__ = ["ROUTES", "app", "respond"]
