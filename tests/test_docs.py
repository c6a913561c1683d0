"""The documentation names what the code has: every setting, every command, the same test command."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import setting_names

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_configuration_table_lists_every_setting_and_no_other():
    table = re.findall(r"^\| `([A-Z_]+)` \|", README, re.MULTILINE)
    assert table == setting_names()


def test_ci_runs_exactly_the_readme_test_command():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert ci[-1].strip() == "make test"
    assert "make test" in README and "make run" in README


# A path in backticks under one of the repository's top folders, as docs/architecture.md writes
# them: `bot/memory/read/recall.py`, `cogs/utils/`, `migrations/`.
_REPO_PATH = re.compile(r"`((?:bot|cogs|migrations|tests|bench)/[\w./-]*)`")


def test_every_path_named_in_the_architecture_doc_exists():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = sorted(set(_REPO_PATH.findall(doc)))
    assert len(named) >= 30, named  # the doc walks the whole layout, not a few files
    missing = [path for path in named if not (ROOT / path).exists()]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"
    # Where a message enters, on each front end.
    assert "cogs/conversation.py" in named and "bot/terminal/chat.py" in named


def test_the_architecture_doc_names_every_module_and_folder():
    """The map is whole: a new module (or package) is placed on it when it is written."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(_REPO_PATH.findall(doc))
    modules = sorted(
        p.relative_to(ROOT).as_posix() for folder in ("bot", "cogs") for p in (ROOT / folder).rglob("*.py")
    )
    unnamed = [m for m in modules if m not in named]
    assert unnamed == [], f"docs/architecture.md does not name: {unnamed}"


def test_the_docs_say_what_is_true_of_both_stores():
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    for module in (
        "bot/clients/postgres.py",
        "bot/memory/stores/move.py",
        "bot/clients/metrics.py",
        "bot/clients/outage.py",
        "bot/clients/health.py",
    ):
        assert f"`{module}`" in architecture, module
    assert "SQLite is the only truth" not in design and "PostgreSQL" in design


def test_the_docs_link_only_to_files_that_exist():
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to missing {target}"


# Documents that are not in the repository: a comment or doc must point to docs/design.md or
# docs/memory.md instead. Spelt in pieces so this file does not match itself.
_OUTSIDE_REFERENCES = re.compile(
    "|".join(
        [r"\b[Ss]eed 00\d", r"\b[Ss]eeds?/0", r"DESIGN" + r"\.md", r"DESIGN,? (?:principle|read)", r"\b[Pp]rinciple \d"]
    )
)


def test_nothing_points_to_documents_outside_the_repository():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("bot", "cogs", "tests", "bench"):
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    found = [
        f"{file.relative_to(ROOT)}:{number}: {line.strip()}"
        for file in files
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE_REFERENCES.search(line)
    ]
    assert found == [], "\n".join(found)
