"""``e31``'s configuration: where it is kept, how it is written, and what overrides what."""
from __future__ import annotations

import json
import stat

import pytest
from e31_cli.config import config_dir, config_path, load_file, normalize_url, require, resolve, save_file
from e31_cli.errors import CliError, Exit
from e31_cli.main import main


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "conf" / "config.json"
    save_file(path, url="http://file.example:8031", token="file-token")
    return path


def test_it_reads_the_saved_file_when_nothing_else_is_set(saved):
    s = resolve(environ={}, path=saved)
    assert (s.url, s.token, s.url_from, s.token_from) == ("http://file.example:8031", "file-token", "file", "file")


def test_the_environment_overrides_the_file(saved):
    s = resolve(environ={"E31_URL": "https://env.example/", "E31_TOKEN": "env-token"}, path=saved)
    assert (s.url, s.token, s.url_from, s.token_from) == ("https://env.example", "env-token", "env", "env")


def test_the_url_option_overrides_the_environment_and_the_file(saved):
    s = resolve(url_option="http://opt.example", environ={"E31_URL": "https://env.example"}, path=saved)
    assert (s.url, s.url_from, s.token) == ("http://opt.example", "option", "file-token")


def test_each_setting_falls_back_on_its_own(saved):
    s = resolve(environ={"E31_TOKEN": "env-token"}, path=saved)
    assert (s.url_from, s.token_from) == ("file", "env")


def test_the_file_is_0600_in_a_0700_directory_even_over_an_older_open_file(tmp_path):
    path = tmp_path / "e31" / "config.json"
    path.parent.mkdir(mode=0o755)
    path.write_text("{}")
    path.chmod(0o644)
    save_file(path, url="http://x", token="secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": "http://x", "token": "secret"}
    fresh = tmp_path / "new" / "config.json"
    save_file(fresh, url="http://x", token="t")
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_the_config_dir_follows_e31_config_dir_then_xdg_then_home(tmp_path):
    assert config_dir({"E31_CONFIG_DIR": "/a", "XDG_CONFIG_HOME": "/b", "HOME": "/c"}).as_posix() == "/a"
    assert config_dir({"XDG_CONFIG_HOME": "/b", "HOME": "/c"}).as_posix() == "/b/e31"
    assert config_dir({"HOME": "/c"}).as_posix() == "/c/.config/e31"
    assert config_path({"HOME": "/c"}).name == "config.json"


@pytest.mark.parametrize("url, expected", [("http://h:8031/", "http://h:8031"),
                                           ("https://h/api/v1/", "https://h"), (" http://h ", "http://h")])
def test_urls_are_normalized(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize("url", ["127.0.0.1:8031", "ftp://h", "http://", "not a url"])
def test_a_url_that_is_not_http_is_a_usage_error(url):
    with pytest.raises(CliError) as info:
        normalize_url(url)
    assert info.value.code == Exit.USAGE and "http://" in info.value.message


def test_nothing_configured_names_what_is_missing(tmp_path):
    with pytest.raises(CliError) as info:
        require(resolve(environ={}, path=tmp_path / "absent.json"))
    assert info.value.code == Exit.USAGE and "URL or token" in info.value.message


def test_a_broken_config_file_is_a_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.json").write_text("{not json")
    monkeypatch.setenv("E31_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("E31_URL", raising=False)
    monkeypatch.delenv("E31_TOKEN", raising=False)
    assert main(["ls"]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "config.json" in err and "e31 login" in err and "Traceback" not in err
    with pytest.raises(CliError):
        load_file(tmp_path / "config.json")


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path):
    path = tmp_path / "e31" / "config.json"
    path.parent.mkdir(mode=0o700)
    target = tmp_path / "stolen"
    (path.parent / "config.json.tmp").symlink_to(target)
    save_file(path, url="http://x", token="secret")
    assert not target.exists()
    assert json.loads(path.read_text())["token"] == "secret"
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.json", "config.json.tmp"]


def test_an_existing_config_dir_open_to_others_is_made_0700(tmp_path):
    path = tmp_path / "e31" / "config.json"
    path.parent.mkdir()
    path.parent.chmod(0o777)
    save_file(path, url="http://x", token="secret")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
