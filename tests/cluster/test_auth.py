"""Driver-side token authentication settings (no cluster needed)."""

from pathlib import Path

from cluster.auth import connection_hint, enable_driver_token_auth, token_source


def test_token_mode_turned_on_only_for_an_existing_cluster_with_a_token(tmp_path):
    home = tmp_path
    env = {}
    assert enable_driver_token_auth("10.0.0.1:6379", env, home) is None and env == {}  # no token anywhere
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("abc")
    assert enable_driver_token_auth(None, env, home) is None and env == {}  # a local cluster: left alone
    assert enable_driver_token_auth("10.0.0.1:6379", env, home) == str(home / ".ray" / "auth_token")
    assert env == {"RAY_AUTH_MODE": "token"}
    env = {"RAY_AUTH_MODE": "disabled"}
    assert enable_driver_token_auth("10.0.0.1:6379", env, home) is None and env["RAY_AUTH_MODE"] == "disabled"


def test_token_sources_in_rays_order(tmp_path):
    f = tmp_path / "tok"
    f.write_text("x")
    assert token_source({"RAY_AUTH_TOKEN": "t", "RAY_AUTH_TOKEN_PATH": str(f)}, tmp_path) == "RAY_AUTH_TOKEN"
    assert token_source({"RAY_AUTH_TOKEN_PATH": str(f)}, tmp_path) == str(f)
    assert token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}, tmp_path) is None


def test_connection_hint_names_mode_and_token(tmp_path):
    msg = connection_hint("h:6379", {"RAY_AUTH_MODE": "token"}, Path(tmp_path))
    assert "h:6379" in msg and "RAY_AUTH_MODE=token" in msg and "none found" in msg and "docs/cluster.md" in msg
