from dataclasses import dataclass, field

import pytest

from engine.config import apply_overrides, check, from_dict, load_toml
from engine.errors import ConfigError


@dataclass(frozen=True)
class Inner:
    k: int = 8
    lam: float = 0.8

    def __post_init__(self):
        check(0 < self.lam <= 1, f"retrieval.lam must be in (0, 1], got {self.lam}")


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    horizons: tuple[int, ...] = (10, 20, 40)
    retrieval: Inner = field(default_factory=Inner)


def test_from_dict_nested_and_coercion():
    cfg = from_dict(Outer, {"horizons": [5], "retrieval": {"lam": 1}})
    assert cfg.horizons == (5,)
    assert cfg.retrieval.lam == 1.0 and isinstance(cfg.retrieval.lam, float)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'kk'.*valid keys: k, lam"):
        from_dict(Outer, {"retrieval": {"kk": 1}})


def test_bad_type_and_validation():
    with pytest.raises(ConfigError, match="retrieval.k must be an integer"):
        from_dict(Outer, {"retrieval": {"k": "8"}}, "")
    with pytest.raises(ConfigError, match=r"retrieval.lam must be in \(0, 1\]"):
        from_dict(Outer, {"retrieval": {"lam": 2.0}})


def test_overrides_parse_toml_values():
    data = apply_overrides({"a": {"b": 1}}, ["a.b=2", "a.c=0.5", "d=[1, 2]", "e=hello"])
    assert data == {"a": {"b": 2, "c": 0.5}, "d": [1, 2], "e": "hello"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides({}, ["novalue"])


def test_load_toml_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("a = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(bad)
