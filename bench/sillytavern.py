"""SillyTavern's own material through Écho, with the default settings: its default card
(Seraphina, a PNG with a four-entry lorebook) and its default World Info (Eldoria).

Run from the repository root: ``python bench/sillytavern.py [CARD.png] [WORLD.json]``. Without
paths, both are fetched from SillyTavern's repository at bench time (they are AGPL-3.0: not
copied into this one; tests/data/sillytavern/ holds files of their shape). Prints, for a
question about each entry of the card's lorebook, the entries that enter the prompt with the
default LORE_BUDGET_CHARS and LORE_SCAN_DEPTH, and whether the entry asked about is among them;
then what the World Info file gives, and what either holds that Écho leaves aside.
"""

from __future__ import annotations

import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.characters.character import load_character
from bot.characters.lore_files import load_lore_file
from bot.config import load_settings

RAW = "https://raw.githubusercontent.com/SillyTavern/SillyTavern/release/default/content/"
FILES = {"card": "default_Seraphina.png", "world": "Eldoria.json"}
# A question about each entry, as a newcomer would ask it (the first is issue 33's).
QUESTIONS = {
    "eldoria": "What happened to those beasts in the forest?",
    "shadowfang": "What is a shadowfang?",
    "glade": "Is this glade really a safe haven?",
    "power": "What kind of magic do you have?",
}


def fetched(name: str, given: str | None, folder: Path) -> Path:
    if given:
        return Path(given)
    path = folder / name
    with urllib.request.urlopen(RAW + name, timeout=60) as response:
        path.write_bytes(response.read())
    return path


def main() -> None:
    settings = load_settings(_env_file=None).engine
    budget, depth = settings.lore_budget_chars, settings.lore_scan_depth
    with tempfile.TemporaryDirectory() as folder:
        try:
            card = fetched(FILES["card"], sys.argv[1] if len(sys.argv) > 1 else None, Path(folder))
            world = fetched(FILES["world"], sys.argv[2] if len(sys.argv) > 2 else None, Path(folder))
        except OSError as exc:
            print(
                f"cannot fetch SillyTavern's files ({exc}); give their paths: python bench/sillytavern.py CARD.png WORLD.json"
            )
            return
        character = load_character(card)
        book = character.lore
        assert book is not None, "the default card has a lorebook"
        print(
            f"{character.name}: {len(book.entries)} lore entries, {sum(e.cost for e in book.entries):,} characters; "
            f"LORE_BUDGET_CHARS={budget:,}, LORE_SCAN_DEPTH={depth}"
        )
        print(f"  ignored: {', '.join(character.ignored) or 'nothing'}")
        brought = 0
        for name, question in QUESTIONS.items():
            hits = book.match([question], budget_chars=budget, scan_depth=depth).hits
            kept = [h.name for h in hits if h.kept]
            left = [f"{h.name} ({h.left_out})" for h in hits if not h.kept]
            brought += name in kept
            print(
                f"  {question!r}: in {', '.join(kept) or 'nothing'}; left out: {', '.join(left) or 'nothing'}; "
                f"asked entry {'in' if name in kept else 'MISSING'}"
            )
        print(f"entries brought in by a question about them: {brought} of {len(QUESTIONS)}")
        lore = load_lore_file(world)
        print(
            f"{world.name}: {len(lore.entries)} entries ({', '.join(e.name for e in lore.entries)}); "
            f"ignored: {', '.join(lore.ignored) or 'nothing'}"
        )


if __name__ == "__main__":
    main()
