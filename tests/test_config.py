import logging
import re
from pathlib import Path

import pytest

from bot.config import SECTIONS, EngineSettings, load_settings, render_env_example, setting_names
from bot.errors import ConfigError

ENV_EXAMPLE = Path(__file__).resolve().parent.parent / ".env.example"
ALL_VARS = setting_names()


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
    assert settings.discord.allowed_channel_ids == [123, 456, 789]
    assert settings.discord.owner_ids == [42]


def test_comma_separated_ids_are_read_from_the_env_file(tmp_path):
    env = tmp_path / "custom.env"
    env.write_text("BLOCKED_USER_IDS=11,22\nALLOWED_ROLE_IDS=[5, 6]\n", encoding="utf-8")
    settings = load_settings(_env_file=env)
    assert settings.discord.blocked_user_ids == [11, 22]
    assert settings.discord.allowed_role_ids == [5, 6]


def test_empty_values_mean_unset(monkeypatch):
    for var in ("DISCORD_TOKEN", "DEV_GUILD_ID", "ALLOWED_USER_IDS", "LLM_BASE_URL", "REFLECTION_MODEL"):
        monkeypatch.setenv(var, "")
    settings = load_settings(_env_file=None)
    assert settings.discord.discord_token is None
    assert settings.discord.dev_guild_id is None
    assert settings.discord.allowed_user_ids == []
    assert settings.llm.base_url == "http://localhost:11434"
    assert settings.engine.reflection_model == settings.engine.llm_model


def test_each_bad_value_gives_one_line_naming_its_variable(monkeypatch):
    monkeypatch.setenv("LLM_API", "olama")
    monkeypatch.setenv("ALLOWED_ROLE_IDS", "12,abc")
    monkeypatch.setenv("HISTORY_MESSAGES", "-1")
    monkeypatch.setenv("DEV_GUILD_ID", "my-server")
    monkeypatch.setenv("LLM_BASE_URL", "localhost:11434")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    lines = error_lines(caught.value)
    # By section (Discord, the chat server, the engine), in each by field.
    assert [line.split(":", 1)[0] for line in lines] == [
        "DEV_GUILD_ID",
        "ALLOWED_ROLE_IDS",
        "LLM_API",
        "LLM_BASE_URL",
        "HISTORY_MESSAGES",
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
    assert load_settings(_env_file=None).engine.reflection_model == "mistral-nemo:12b"
    monkeypatch.setenv("REFLECTION_MODEL", "qwen2.5:14b")
    settings = load_settings(_env_file=None)
    assert (settings.engine.llm_model, settings.engine.reflection_model) == ("mistral-nemo:12b", "qwen2.5:14b")


def test_llm_concurrency_defaults_to_what_each_server_takes_at_once(monkeypatch):
    # Ollama's OLLAMA_NUM_PARALLEL defaults to 1, llama.cpp's server to 4 slots.
    settings = load_settings(_env_file=None)
    assert settings.engine.concurrency(settings.llm.api) == 1
    monkeypatch.setenv("LLM_API", "openai")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8080")
    settings = load_settings(_env_file=None)
    assert settings.engine.concurrency(settings.llm.api) == 4
    monkeypatch.setenv("LLM_CONCURRENCY", "2")
    settings = load_settings(_env_file=None)
    assert settings.engine.concurrency(settings.llm.api) == 2
    monkeypatch.setenv("LLM_CONCURRENCY", "-1")
    with pytest.raises(ConfigError, match="LLM_CONCURRENCY"):
        load_settings(_env_file=None)


def test_openai_gets_the_openai_base_url_unless_one_is_given(monkeypatch):
    monkeypatch.setenv("LLM_API", "openai")
    monkeypatch.setenv("LLM_API_KEY", "sk-test")
    assert load_settings(_env_file=None).llm.base_url == "https://api.openai.com"
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    assert load_settings(_env_file=None).llm.base_url == "http://127.0.0.1:8080/v1"


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
    assert settings.embedding.base_url == "http://gpu-box:11434"
    assert settings.embedding.api_key is not None
    assert settings.embedding.api_key.get_secret_value() == "chat-key"

    monkeypatch.setenv("EMBEDDINGS_BASE_URL", "http://embed-box:8080/v1")
    monkeypatch.setenv("EMBEDDINGS_API_KEY", "embed-key")
    settings = load_settings(_env_file=None)
    assert settings.embedding.base_url == "http://embed-box:8080/v1"
    assert settings.embedding.api_key is not None
    assert settings.embedding.api_key.get_secret_value() == "embed-key"


def test_local_embeddings_take_no_server():
    settings = load_settings(_env_file=None, llm_api_key="chat-key")
    assert settings.embedding.kind == "local"
    assert (settings.embedding.base_url, settings.embedding.api_key) == (None, None)


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
    assert settings.engine.llm_model == "from-file"
    assert settings.logging.level == "DEBUG"
    assert settings.engine.history_chars == 200


def test_the_default_env_file_is_dot_env_in_the_working_directory(tmp_path):
    (tmp_path / ".env").write_text("DEV_GUILD_ID=123\n", encoding="utf-8")
    assert load_settings().discord.dev_guild_id == 123


def test_unknown_keys_are_ignored_but_a_likely_typo_is_logged(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PATH_TO_SOMETHING_ELSE", "x")
    env = tmp_path / ".env"
    env.write_text("LLM_MODLE=qwen2.5:14b\nCOMPOSE_PROJECT_NAME=echo\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="bot.config"):
        settings = load_settings(_env_file=env)
    assert settings.engine.llm_model == EngineSettings.model_fields["llm_model"].default
    warnings = [r.getMessage() for r in caplog.records]
    assert any("LLM_MODLE" in w and "did you mean LLM_MODEL?" in w for w in warnings)
    assert any("COMPOSE_PROJECT_NAME" in w and "did you mean" not in w for w in warnings)


def test_a_missing_discord_token_is_reported_only_when_asked_for():
    settings = load_settings(_env_file=None)
    with pytest.raises(ConfigError, match="DISCORD_TOKEN"):
        settings.discord.require_discord_token()
    assert load_settings(_env_file=None, discord_token="abc.def").discord.require_discord_token() == "abc.def"


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
    assert load_settings(_env_file=None).discord.discord_api_url == "https://discord.com/api/v10"
    proxied = load_settings(_env_file=None, discord_api_url="http://127.0.0.1:8080/api/v10/")
    assert proxied.discord.discord_api_url == "http://127.0.0.1:8080/api/v10"
    with pytest.raises(ConfigError, match="DISCORD_API_URL"):
        load_settings(_env_file=None, discord_api_url="discord.com/api/v10")


def test_each_setting_is_declared_once_in_one_section():
    names = setting_names()
    assert len(names) == len(set(names)) == sum(len(s.model_fields) for s in SECTIONS)


def test_a_section_reads_its_prefix_and_the_stable_names_it_keeps(monkeypatch):
    for var, value in {
        "LLM_API": "openai",
        "LLM_API_KEY": "sk-test",
        "LLM_KEEP_ALIVE": "10m",  # prefix LLM_
        "LLM_CONTEXT_TOKENS": "4096",  # the engine's, under its stable name
        "EMBEDDINGS": "ollama",
        "EMBEDDINGS_MODEL": "bge-m3",
        "INDEX_INTERVAL_SECONDS": "12",  # EMBEDDINGS_, kept names
        "EMBEDDINGS_BASE_URL": "http://embed-box:11434",
        "WEB_PORT": "9090",
        "LOG_LEVEL": "warning",
        "REFLECTION_MODEL": "qwen2.5:14b",
    }.items():
        monkeypatch.setenv(var, value)
    settings = load_settings(_env_file=None)
    assert (settings.llm.api, settings.llm.keep_alive, settings.llm.told_keep_alive) == ("openai", "10m", None)
    assert (settings.engine.llm_context_tokens, settings.llm.told_context(4096)) == (4096, None)
    assert (settings.embedding.kind, settings.embedding.model, settings.embedding.index_interval_seconds) == (
        "ollama",
        "bge-m3",
        12.0,
    )
    assert (settings.web.port, settings.logging.level, settings.engine.reflection_model) == (
        9090,
        "WARNING",
        "qwen2.5:14b",
    )
    # Given in code, a setting is named as in the environment too.
    assert load_settings(_env_file=None, index_interval_seconds=30, web_port=1).embedding.index_interval_seconds == 30


def test_an_override_that_is_no_setting_is_refused():
    with pytest.raises(TypeError, match="LLM_MODLE is not a setting"):
        load_settings(_env_file=None, LLM_MODLE="x")


def test_a_change_for_a_test_reaches_the_section_that_holds_it():
    settings = load_settings(_env_file=None)
    changed_settings = settings.replace(burst_seconds=0, history_messages=3)
    assert (changed_settings.discord.burst_seconds, changed_settings.engine.history_messages) == (0, 3)
    assert (settings.discord.burst_seconds, settings.engine.history_messages) != (0, 3)
