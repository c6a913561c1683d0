"""Installing Écho prints nothing to worry about: the build backend is pinned to a range that
reads pyproject.toml as written (issue 33: setuptools' dated deprecation of `project.license`
was printed three times by every install)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_building_echo_prints_no_deprecation(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "deprecat" not in (done.stdout + done.stderr).lower(), done.stderr
    assert list(tmp_path.glob("echo_bot-*.whl"))


def test_the_docker_build_context_leaves_out_secrets_and_data() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    for secret in (".env", "data/", "*.sqlite3", ".git/", "backups/"):
        assert secret in ignored, secret
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    images = [line.split("image:")[1].strip() for line in compose.splitlines() if "image:" in line]
    assert images and all(":" in image and not image.endswith(":latest") for image in images), images


def test_make_chat_without_user_talks_as_the_login_name_not_a_pronoun() -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("USER", "USER_NAME", "LOGNAME")}
    done = subprocess.run(
        ["make", "-n", "-W", ".venv/.installed", "chat"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    command = next(line for line in done.stdout.splitlines() if " chat --user " in line)
    login = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    assert command.endswith(f"--user {login}"), command
