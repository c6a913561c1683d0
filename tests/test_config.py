import logging
import re
from pathlib import Path

import pytest

from bot.config import Settings, load_settings, render_env_example
from bot.errors import ConfigError

ENV_EXAMPLE = Path(__file__).resolve().parent.parent / ".env.example"
ALL_VARS = [name.upper() for name in Settings.model_fields]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No setting leaks in from the machine's environment or a developer's .env."""
    for var in ALL_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    monkeypatch.chdir(tmp_path)


def error_lines(exc: ConfigError) -> list[str]:
    return [line.strip() for line in str(exc).splitlines()[1:]]


def test_comma_separated_ids_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("ALLOWED_CHANNEL_IDS", " 123, 456 ,789")
    monkeypatch.setenv("OWNER_IDS", "42")
    settings = load_settings(_env_file=None)
    assert settings.allowed_channel_ids == [123, 456, 789]
    assert settings.owner_ids == [42]


def test_comma_separated_ids_are_read_from_the_env_file(tmp_path):
    env = tmp_path / "custom.env"
    env.write_text("BLOCKED_USER_IDS=11,22\nALLOWED_ROLE_IDS=[5, 6]\n", encoding="utf-8")
    settings = load_settings(_env_file=env)
    assert settings.blocked_user_ids == [11, 22]
    assert settings.allowed_role_ids == [5, 6]


def test_empty_values_mean_unset(monkeypatch):
    for var in ("DISCORD_TOKEN", "DEV_GUILD_ID", "ALLOWED_USER_IDS", "LLM_BASE_URL", "REFLECTION_MODEL"):
        monkeypatch.setenv(var, "")
    settings = load_settings(_env_file=None)
    assert settings.discord_token is None
    assert settings.dev_guild_id is None
    assert settings.allowed_user_ids == []
    assert settings.llm_base_url == "http://localhost:11434"
    assert settings.reflection_model == settings.llm_model


def test_each_bad_value_gives_one_line_naming_its_variable(monkeypatch):
    monkeypatch.setenv("LLM_API", "olama")
    monkeypatch.setenv("ALLOWED_ROLE_IDS", "12,abc")
    monkeypatch.setenv("HISTORY_MESSAGES", "-1")
    monkeypatch.setenv("DEV_GUILD_ID", "my-server")
    monkeypatch.setenv("LLM_BASE_URL", "localhost:11434")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    lines = error_lines(caught.value)
    assert [line.split(":", 1)[0] for line in lines] == [
        "DEV_GUILD_ID", "LLM_API", "LLM_BASE_URL", "ALLOWED_ROLE_IDS", "HISTORY_MESSAGES"
    ]
    by_var = {line.split(":", 1)[0]: line for line in lines}
    assert "'ollama' or 'openai'" in by_var["LLM_API"] and "olama" in by_var["LLM_API"]
    assert "'abc' is not an id" in by_var["ALLOWED_ROLE_IDS"]
    assert "greater than or equal to 0" in by_var["HISTORY_MESSAGES"]
    assert "http://" in by_var["LLM_BASE_URL"]


def test_a_bad_secret_is_not_quoted_in_the_error():
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None, llm_api_key=987654321)
    assert error_lines(caught.value)[0].startswith("LLM_API_KEY:")
    assert "987654321" not in str(caught.value)


def test_reflection_model_defaults_to_the_chat_model(monkeypatch):
    monkeypatch.setenv("LLM_MODEL", "mistral-nemo:12b")
    assert load_settings(_env_file=None).reflection_model == "mistral-nemo:12b"
    monkeypatch.setenv("REFLECTION_MODEL", "qwen2.5:14b")
    settings = load_settings(_env_file=None)
    assert (settings.llm_model, settings.reflection_model) == ("mistral-nemo:12b", "qwen2.5:14b")


def test_llm_concurrency_defaults_to_what_each_server_takes_at_once(monkeypatch):
    # Ollama's OLLAMA_NUM_PARALLEL defaults to 1, llama.cpp's server to 4 slots.
    assert load_settings(_env_file=None).engine.llm_concurrency == 1
    monkeypatch.setenv("LLM_API", "openai")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8080")
    assert load_settings(_env_file=None).engine.llm_concurrency == 4
    monkeypatch.setenv("LLM_CONCURRENCY", "2")
    assert load_settings(_env_file=None).engine.llm_concurrency == 2
    monkeypatch.setenv("LLM_CONCURRENCY", "-1")
    with pytest.raises(ConfigError, match="LLM_CONCURRENCY"):
        load_settings(_env_file=None)


def test_openai_gets_the_openai_base_url_unless_one_is_given(monkeypatch):
    monkeypatch.setenv("LLM_API", "openai")
    monkeypatch.setenv("LLM_API_KEY", "sk-test")
    assert load_settings(_env_file=None).llm_base_url == "https://api.openai.com"
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    assert load_settings(_env_file=None).llm_base_url == "http://127.0.0.1:8080/v1"


def test_the_openai_cloud_without_a_key_is_refused_at_load(monkeypatch):
    monkeypatch.setenv("LLM_API", "openai")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    assert error_lines(caught.value) == ["LLM_API_KEY: required by https://api.openai.com"]


def test_embeddings_use_the_llm_server_and_key_unless_given_their_own(monkeypatch):
    monkeypatch.setenv("LLM_BASE_URL", "http://gpu-box:11434")
    monkeypatch.setenv("LLM_API_KEY", "chat-key")
    monkeypatch.setenv("EMBEDDINGS", "openai")
    settings = load_settings(_env_file=None)
    assert settings.embeddings_base_url == "http://gpu-box:11434"
    assert settings.embeddings_api_key is not None
    assert settings.embeddings_api_key.get_secret_value() == "chat-key"

    monkeypatch.setenv("EMBEDDINGS_BASE_URL", "http://embed-box:8080/v1")
    monkeypatch.setenv("EMBEDDINGS_API_KEY", "embed-key")
    settings = load_settings(_env_file=None)
    assert settings.embeddings_base_url == "http://embed-box:8080/v1"
    assert settings.embeddings_api_key is not None
    assert settings.embeddings_api_key.get_secret_value() == "embed-key"


def test_local_embeddings_take_no_server():
    settings = load_settings(_env_file=None, llm_api_key="chat-key")
    assert settings.embeddings == "local"
    assert (settings.embeddings_base_url, settings.embeddings_api_key) == (None, None)


def test_openai_cloud_embeddings_without_any_key_name_their_variable(monkeypatch):
    monkeypatch.setenv("EMBEDDINGS", "openai")
    monkeypatch.setenv("EMBEDDINGS_BASE_URL", "https://api.openai.com/v1")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    assert error_lines(caught.value) == ["EMBEDDINGS_API_KEY: required by https://api.openai.com/v1"]


def test_ollama_embeddings_cannot_inherit_the_openai_cloud(monkeypatch):
    monkeypatch.setenv("LLM_API", "openai")
    monkeypatch.setenv("LLM_API_KEY", "sk-chat")
    monkeypatch.setenv("EMBEDDINGS", "ollama")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    [line] = error_lines(caught.value)
    assert line.startswith("EMBEDDINGS_BASE_URL: EMBEDDINGS=ollama needs an Ollama server")


def test_env_file_keys_are_case_insensitive_and_the_environment_wins(monkeypatch, tmp_path):
    env = tmp_path / "bot.env"
    env.write_text("llm_model=from-file\nLog_Level=debug\nHISTORY_CHARS=100\n", encoding="utf-8")
    monkeypatch.setenv("HISTORY_CHARS", "200")
    settings = load_settings(_env_file=env)
    assert settings.llm_model == "from-file"
    assert settings.log_level == "DEBUG"
    assert settings.history_chars == 200


def test_the_default_env_file_is_dot_env_in_the_working_directory(tmp_path):
    (tmp_path / ".env").write_text("DEV_GUILD_ID=123\n", encoding="utf-8")
    assert load_settings().dev_guild_id == 123


def test_unknown_keys_are_ignored_but_a_likely_typo_is_logged(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH_TO_SOMETHING_ELSE", "x")
    env = tmp_path / ".env"
    env.write_text("LLM_MODLE=qwen2.5:14b\nCOMPOSE_PROJECT_NAME=echo\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="bot.config"):
        settings = load_settings(_env_file=env)
    assert settings.llm_model == Settings.model_fields["llm_model"].default
    warnings = [r.getMessage() for r in caplog.records]
    assert any("LLM_MODLE" in w and "did you mean LLM_MODEL?" in w for w in warnings)
    assert any("COMPOSE_PROJECT_NAME" in w and "did you mean" not in w for w in warnings)


def test_a_missing_discord_token_is_reported_only_when_asked_for():
    settings = load_settings(_env_file=None)
    with pytest.raises(ConfigError, match="DISCORD_TOKEN"):
        settings.require_discord_token()
    assert load_settings(_env_file=None, discord_token="abc.def").require_discord_token() == "abc.def"


def _example_assignments() -> list[tuple[str, str]]:
    """The `# VAR=value` lines of .env.example: the last line of each commented block."""
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    found = []
    for index, line in enumerate(lines):
        match = re.fullmatch(r"# ([A-Z][A-Z0-9_]*)=(.*)", line)
        if match and (index + 1 == len(lines) or not lines[index + 1].strip()):
            found.append((match[1], match[2]))
    return found


def test_env_example_lists_every_setting_in_field_order_and_nothing_else():
    assert [var for var, _ in _example_assignments()] == ALL_VARS


def test_env_example_is_rendered_from_the_field_descriptions():
    # Regenerate with: python -m bot.config > .env.example
    assert ENV_EXAMPLE.read_text(encoding="utf-8") == render_env_example()


def test_env_example_defaults_are_the_code_defaults(tmp_path):
    env = tmp_path / "uncommented.env"
    env.write_text("".join(f"{var}={value}\n" for var, value in _example_assignments()), encoding="utf-8")
    assert load_settings(_env_file=env) == load_settings(_env_file=None)


def test_the_discord_api_url_defaults_to_discord_and_loses_a_trailing_slash():
    assert load_settings(_env_file=None).discord_api_url == "https://discord.com/api/v10"
    proxied = load_settings(_env_file=None, discord_api_url="http://127.0.0.1:8080/api/v10/")
    assert proxied.discord_api_url == "http://127.0.0.1:8080/api/v10"
    with pytest.raises(ConfigError, match="DISCORD_API_URL"):
        load_settings(_env_file=None, discord_api_url="discord.com/api/v10")
