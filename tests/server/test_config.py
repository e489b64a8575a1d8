"""RunConfig: read once from Flower's flat run config, typed, validated, typos refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from server.config import RunConfig
from shared.errors import ConfigError

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_pyproject_defaults_are_valid_keys() -> None:
    app_config = tomllib.loads(PYPROJECT.read_text())["tool"]["flwr"]["app"]["config"]
    config = RunConfig.from_run_config(app_config)
    assert config.mode == app_config["mode"]
    assert config.max_private_auc == pytest.approx(app_config["max-private-auc"])
    assert config.num_sites == app_config["num-sites"]


def test_round_trip_through_run_config() -> None:
    config = RunConfig(mode="federated", lam=2.5, seed=7, attackers="knn,mlp")
    again = RunConfig.from_run_config(config.to_run_config())
    assert again == config
    assert again.attacker_names() == ["knn", "mlp"]
    assert RunConfig().attacker_names() is None


def test_strings_from_cli_overrides_are_coerced() -> None:
    config = RunConfig.from_run_config(
        {"num-sites": "5", "lambda": "0.5", "federated-audit": "false", "seed": 3.0}
    )
    assert (config.num_sites, config.lam, config.federated_audit, config.seed) == (5, 0.5, False, 3)


@pytest.mark.parametrize(
    ("run_config", "needle"),
    [
        ({"lamda": 1.0}, "unknown run-config key"),
        ({"mode": "pooled"}, "mode must be one of"),
        ({"max-private-auc": 0.0}, "max-private-auc"),
        ({"num-sites": 0}, "num-sites"),
        ({"seed": 1.5}, "must be of type int"),
        ({"encode-timeout": -1}, "encode-timeout"),
        ({"bundle": "/x"}, "trusted-key"),
        ({"shaper-params": "[1]"}, "shaper-params"),
        ({"downstream-hidden": "a,b"}, "downstream-hidden"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(run_config: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        RunConfig.from_run_config(run_config)


def test_hidden_sizes() -> None:
    assert RunConfig(downstream_hidden="").hidden_sizes() == ()
    assert RunConfig(downstream_hidden="8, 4").hidden_sizes() == (8, 4)
