"""Both apps speak the same protocol, and the ClientApp routes every message type of it."""

from __future__ import annotations

import ast
from pathlib import Path

import client.protocol as cp
import server.protocol as sp
import shared.protocol as shared_protocol

ROOT = Path(__file__).resolve().parents[2]


def _constants(module: object) -> dict[str, object]:
    return {k: v for k, v in vars(module).items() if k.isupper() and not k.startswith("_")}


def test_both_apps_speak_the_shared_protocol() -> None:
    assert _constants(sp) == _constants(cp) == _constants(shared_protocol)
    assert set(shared_protocol.__all__) == set(_constants(shared_protocol))


def test_client_app_routes_every_message_type() -> None:
    from client.app import ROUTES, app

    types = {sp.DISCOVER, sp.ENCODE, sp.AUDIT, sp.SITE_AUDIT, sp.FEDAVG}
    assert set(ROUTES) == types
    registered = set(app._registered_funcs)  # Flower's own routing table
    assert types <= registered


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_layers_server_and_client_never_import_each_other() -> None:
    for path in (ROOT / "server").glob("*.py"):
        assert not {"client", "simulations"} & _imports(path), path
    for path in (ROOT / "client").glob("*.py"):
        assert not {"server", "simulations"} & _imports(path), path
