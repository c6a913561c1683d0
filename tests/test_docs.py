"""The documentation names what the code has: every setting, every command, the same test command."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_configuration_table_lists_every_setting_and_no_other():
    table = re.findall(r"^\| `([A-Z_]+)` \|", README, re.MULTILINE)
    assert table == [name.upper() for name in Settings.model_fields]


def test_ci_runs_exactly_the_readme_test_command():
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert ci[-1].strip() == "make test"
    assert "make test" in README and "make run" in README
