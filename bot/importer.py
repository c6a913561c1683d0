"""`python -m bot import FILE --user ID`: a past conversation brought into Écho's memory.

The file is read whole and checked first (bot/characters/transcripts.py): a file that cannot be
read says so in one sentence and nothing is written. `--dry-run` stops there and prints what
would be imported: the messages, the exchanges, the first and last dates, who is who. Otherwise
an engine is built on a replay clock (bot/engine/importing.py), without the bot's jobs (no
sweep of pending reflections, no consolidation: those are the running bot's), and each
exchange is reflected in order under a progress bar (tqdm): exchanges done, memories written,
model time, and the time left.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config import Settings, secret
from bot.memory.model import PersonId

if TYPE_CHECKING:
    from bot.characters.cast import Cast
    from bot.characters.character import Character
    from bot.characters.transcripts import Transcript

# The bar is redrawn at most this often: a fast model does tens of exchanges a second.
BAR_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class ImportArgs:
    file: Path
    user: PersonId
    character: str | None
    name: str | None
    dry_run: bool


def _date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


async def run_import(settings: Settings, args: ImportArgs) -> int:
    """The command's work; its exit status (0 done, 1 nothing or not all imported)."""
    from bot.characters.cast import load_cast
    from bot.characters.transcripts import read_transcript
    from bot.errors import ImportFileError

    storage = settings.storage
    cast = load_cast(storage.characters_dir, storage.character_file)
    character = cast.get(args.character) if args.character else cast.default
    if args.character and character.key != args.character:
        known = ", ".join(sorted(cast.characters))
        print(
            f"Nothing was imported: there is no character {args.character!r} (the characters are {known}).",
            file=sys.stderr,
        )
        return 1
    try:
        transcript = read_transcript(
            args.file, character_name=character.name, person_id=args.user, person_name=args.name
        )
    except ImportFileError as exc:
        print(f"Nothing was imported: {exc}", file=sys.stderr)
        return 1
    exchanges = transcript.exchanges()
    said = transcript.said
    dates = [s.at for s in said if s.at is not None]
    print(
        f"{transcript.file}: a {transcript.kind} conversation",
        "(a direct one)" if transcript.direct else "(in a server)",
    )
    print(
        f"  the person: {transcript.person_name or '—'} (id {args.user}), {sum(s.speaker == 'person' for s in said)} messages"
    )
    print(
        f"  the character: {transcript.character_name or '—'}"
        + (f" (id {transcript.character_id})" if transcript.character_id else "")
        + f", {sum(s.speaker == 'character' for s in said)} messages; remembered by {character.name} ({character.key})"
    )
    if transcript.others:
        print(f"  left out: {sum(transcript.others.values())} messages of {', '.join(sorted(transcript.others)[:5])}")
    if transcript.skipped:
        print(f"  skipped: {transcript.skipped} system, hidden or empty messages")
    print(f"  {len(exchanges)} exchanges, from {_date(min(dates, default=None))} to {_date(max(dates, default=None))}")
    if not dates:
        print("  the file has no dates: the exchanges are dated by the import")
    if args.dry_run or not exchanges:
        return 0
    return await _import(settings, args, transcript, cast, character)


async def _import(
    settings: Settings, args: ImportArgs, transcript: Transcript, cast: Cast, character: Character
) -> int:
    import asyncio

    import httpx
    from tqdm import tqdm

    from bot.clients.databases import open_database
    from bot.clients.embeddings import make_embedder
    from bot.clients.llm import LLMClient
    from bot.engine import Engine
    from bot.engine.importing import ImportProgress, ReplayClock
    from bot.errors import ImportStopped

    storage, server, models, embedding = settings.storage, settings.llm, settings.engine, settings.embedding
    http = httpx.AsyncClient(timeout=httpx.Timeout(models.llm_timeout_seconds, connect=5.0))
    db = await open_database(storage.database_url or storage.database_path)
    progress = ImportProgress()
    bar = tqdm(total=0, unit="exchange", mininterval=BAR_SECONDS, dynamic_ncols=True, file=sys.stderr)
    try:
        llm = LLMClient(
            http, api=server.api, base_url=server.base_url, api_key=secret(server.api_key),
            timeout=models.llm_timeout_seconds, context_tokens=server.told_context(models.llm_context_tokens),
            keep_alive=server.told_keep_alive,
        )  # fmt: skip
        embedder = make_embedder(
            embedding.kind,
            model=embedding.model,
            base_url=embedding.base_url,
            api_key=secret(embedding.api_key),
            http=http,
        )
        engine = Engine(
            db=db, llm=llm, embedder=embedder, settings=models, character=cast.default, cast=cast,
            clock=ReplayClock(),
        )  # fmt: skip
        plan = engine.operator.import_plan(transcript, args.user, character)
        bar.reset(total=len(plan.exchanges))

        def shown(now: ImportProgress) -> None:
            nonlocal progress
            progress = now
            bar.n = now.done
            bar.set_postfix(memories=now.memories, model=f"{now.model_seconds:.0f}s", refresh=False)
            bar.refresh() if bar.n == bar.total else bar.update(0)

        try:
            done = await engine.operator.import_conversation(plan, shown)
        except asyncio.CancelledError:
            bar.close()
            print(
                f"Interrupted after {progress.done} of {len(plan.exchanges)} exchanges. What was imported "
                "stays: run the same command again to continue.",
                file=sys.stderr,
            )
            raise
        except ImportStopped as exc:
            bar.close()
            print(
                f"Stopped after {exc.done} of {len(plan.exchanges)} exchanges: {exc}. "
                "What was imported stays: run the same command again to continue.",
                file=sys.stderr,
            )
            return 1
        bar.close()
        if done.already:
            print(f"Already imported: {len(plan.exchanges)} exchanges, nothing written.")
            return 0
        print(
            f"Imported {done.total - done.skipped} exchanges ({done.skipped} from an earlier run), "
            f"{done.memories} memory changes, {done.model_seconds:.1f} s of model time; "
            f"{done.history} dated memories kept as history"
            + ("; the story's summary rebuilt." if done.summary else "; the story's summary could not be rebuilt.")
        )
        if done.set_aside:
            print(f"{done.set_aside} exchanges could not be reflected and were set aside, as live ones are.")
        return 0
    finally:
        bar.close()
        await http.aclose()
        await db.close()
