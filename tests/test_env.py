"""e31site/env.py: a setting's variable set to something unreadable names the variable."""
import pytest

from e31site.env import env_float, env_int


@pytest.mark.parametrize(("read", "raw", "kind"), [(env_int, "abc", "an integer"), (env_int, "1.5", "an integer"),
                                                    (env_float, "fast", "a number")])
def test_an_unreadable_value_names_its_variable(monkeypatch, read, raw, kind):
    monkeypatch.setenv("E31_SOME_S", raw)
    with pytest.raises(ValueError, match=f"E31_SOME_S='{raw}' is not {kind}"):
        read("E31_SOME_S", 1)


def test_unset_or_empty_gives_the_default_and_a_value_is_read(monkeypatch):
    monkeypatch.setenv("E31_SOME_S", "")
    assert env_int("E31_SOME_S", 7) == 7 and env_float("E31_SOME_S", 0.5) == 0.5
    monkeypatch.setenv("E31_SOME_S", "3")
    assert env_int("E31_SOME_S", 7) == 3 and env_float("E31_SOME_S", 0.5) == 3.0
