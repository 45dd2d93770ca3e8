"""Configuration precedence: arguments > TOML file > KERNELSKILL_* variables > defaults, each layer tested."""

import pytest

from kernelskill.graph.context import Context, load_context


@pytest.fixture
def toml(tmp_path):
    def write(text: str):
        path = tmp_path / "kernelskill.toml"
        path.write_text(text)
        return path

    return write


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELSKILL_MAX_ROUNDS", raising=False)
    assert load_context(tmp_path / "none.toml").max_rounds == 3


def test_the_environment_over_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_MAX_ROUNDS", "9")
    assert load_context(tmp_path / "none.toml").max_rounds == 9
    assert Context().max_rounds == 9


def test_the_file_over_the_environment(toml, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_MAX_ROUNDS", "9")
    assert load_context(toml("max_rounds = 5\n")).max_rounds == 5


def test_an_explicit_value_over_the_file_and_the_environment_even_when_it_is_the_default(toml, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_MAX_ROUNDS", "9")
    path = toml("max_rounds = 5\n")
    assert load_context(path, max_rounds=3).max_rounds == 3  # 3 is also the default: still explicit
    assert Context(max_rounds=3).max_rounds == 3  # e.g. a resumed run's saved configuration


def test_the_config_file_from_the_environment(toml, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_CONFIG", str(toml('kernels = "custom"\n')))
    assert load_context().kernels == "custom" and Context().kernels == "custom"


def test_bad_values_and_unknown_keys_name_the_field(toml, monkeypatch):
    with pytest.raises(ValueError, match="unknown configuration key 'max_round'"):
        load_context(toml("max_round = 5\n"))
    monkeypatch.setenv("KERNELSKILL_MAX_REPAIRS", "many")
    with pytest.raises(ValueError, match="max_repairs: Input should be a valid integer"):
        load_context(toml(""))


def test_the_schema_carries_every_description():
    schema = Context.model_json_schema()["properties"]
    assert all(p.get("description") for p in schema.values())
