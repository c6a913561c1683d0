"""Every view of the owner's page, over real HTTP: with data and empty, never without the token,
hostile text shown as text, an erased user gone."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import pytest

from bot.characters.character import load_character
from bot.memory.model import NewMemory, utcnow
from bot.web.server import COOKIE, session_value
from tests.conftest import Clock
from tests.fakes.llm_server import Reply
from tests.web.conftest import TOKEN, Page, serving

PROTECTED = ["/", "/?window=24h", "/users/alice", "/users/alice/turns/1", "/metrics", "/nowhere"]


async def test_every_view_refuses_without_the_token(page: Page):
    await page.play("Bonjour, je m'appelle Alice.")
    for path in PROTECTED:
        assert (await page.get(path)).status_code in (200, 404), path  # with it: there
        for token in (None, "wrong-token-0123456789", TOKEN + "x", TOKEN[:-1], "0"):
            response = await page.get(path, token=token)
            assert response.status_code == 401, (path, token)
            assert "Alice" not in response.text and "alice" not in response.text
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
        # A forged cookie is no better than no cookie.
        for cookie in ("0" * 64, TOKEN, session_value(TOKEN + "x")):
            forged = await page.http.get(page.url + path, headers={"Cookie": f"{COOKIE}={cookie}"})
            assert forged.status_code == 401, (path, cookie)


async def test_a_browser_without_the_token_gets_the_login_form_and_nothing_else(page: Page):
    await page.play("Bonjour, je m'appelle Alice.")
    response = await page.http.get(page.url + "/users/alice", headers={"Accept": "text/html"})
    assert response.status_code == 401
    assert '<form method="post" action="/login">' in response.text
    assert 'name="next" value="/users/alice"' in response.text
    assert "Je note" not in response.text and "Alice" not in response.text


async def test_the_login_form_sets_an_httponly_cookie_that_is_not_the_token(page: Page):
    refused = await page.http.post(page.url + "/login", data={"token": "nope", "next": "/"})
    assert refused.status_code == 401 and "That is not the token." in refused.text
    assert COOKIE not in refused.cookies

    done = await page.http.post(page.url + "/login", data={"token": TOKEN, "next": "/users/alice"})
    assert done.status_code == 303 and done.headers["Location"] == "/users/alice"
    cookie = done.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert TOKEN not in cookie
    assert f"{COOKIE}={session_value(TOKEN)}" in cookie

    overview = await page.http.get(page.url + "/", headers={"Cookie": f"{COOKIE}={session_value(TOKEN)}"})
    assert overview.status_code == 200 and "Overview" in overview.text


HOSTILE_NEXT = [
    "//evil.example/",
    "https://evil.example/",
    "\\\\evil",
    "javascript:alert(1)",
    "/\t/evil.example/",  # /login?next=/%09/evil.example/: a browser drops the tab
    "/\n/evil.example/",
    "/\r/evil.example/",
    "/\r\nSet-Cookie: echo_session=x",
    "/\\evil.example/",
    "/\\/evil.example/",
    "\t//evil.example/",
    " //evil.example/",
    "///evil.example/",
    "http:/evil.example/",
    "HTTPS://evil.example",
    "evil.example",
    "/users/\x00alice",
    "/\u2028/evil.example/",
    "/\uff0f/evil.example/",
    "/%0d%0aSet-Cookie:x",  # stays encoded: a path of this site
]


@pytest.mark.parametrize("target", HOSTILE_NEXT)
async def test_login_never_redirects_to_another_site(page: Page, target: str):
    done = await page.http.post(page.url + "/login", data={"token": TOKEN, "next": target})
    assert done.status_code == 303
    location = done.headers["Location"]
    assert location == "/" or (target == location and target.startswith("/%0d")), location
    # The form served for that `next` carries a path of this site only, whatever was asked.
    form = await page.http.get(page.url + "/login", params={"next": target})
    assert form.status_code == 200
    carried = re.search(r'name="next" value="([^"]*)"', form.text)
    assert carried is not None and carried[1] == location


@pytest.mark.parametrize("target", ["/", "/users/alice", "/users/alice/turns/1", "/?window=24h", "/users/a%2Fb"])
async def test_login_goes_back_to_a_path_of_this_site(page: Page, target: str):
    done = await page.http.post(page.url + "/login", data={"token": TOKEN, "next": target})
    assert done.status_code == 303 and done.headers["Location"] == target


async def test_healthz_is_open_and_says_only_whether_each_part_answers(page: Page):
    response = await page.http.get(page.url + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"llm": True, "embedder": True, "database": True}}


async def test_every_view_renders_empty(page: Page):
    overview = await page.get("/")
    assert overview.status_code == 200
    assert "Nobody has talked to Écho yet." in overview.text
    assert "Model queue" in overview.text and '<td class="text">live</td><td class="num">0</td>' in overview.text
    assert "No turn in this period." in overview.text
    assert "No turn recorded yet." in overview.text
    for key in ("24h", "30d"):
        assert (await page.get(f"/?window={key}")).status_code == 200
    user = await page.get("/users/alice")
    assert user.status_code == 404 and "Nothing is stored about user alice." in user.text
    turn = await page.get("/users/alice/turns/1")
    assert turn.status_code == 404
    assert (await page.get("/users/alice/turns/not-a-number")).status_code == 404


async def test_every_view_renders_with_data(page: Page):
    await page.play("Bonjour, je m'appelle Alice et j'habite à Nantes.")
    await page.play("J'adore la valse et les chats.")
    await page.engine.memories.remember("alice", "Alice joue du violoncelle.", story_id="chan-1", place="guild-1")
    await page.play("Tu te souviens de mon instrument ?")
    await page.play("Salut, moi c'est Bob.", user="bob", name="Bob")

    overview = await page.get("/")
    assert overview.status_code == 200
    text = overview.text
    # People by their display name, their id beside it.
    assert '<a href="/users/alice">Alice</a> <span class="muted">alice</span>' in text
    assert '<a href="/users/bob">Bob</a> <span class="muted">bob</span>' in text
    assert text.count("<svg") >= 4  # turns, latency, prompt size, memories per type
    assert re.search(r'<div class="value">4</div><div class="label">turns \(4 answered, 0 degraded, 0 failed\)', text)
    # The model queue: each priority's calls and waits (4 replies, 4 reflections).
    assert re.search(r'<td class="text">live</td><td class="num">4</td>(<td class="num">[^<]+</td>){3}', text)
    assert re.search(r'<td class="text">reflection</td><td class="num">4</td>', text)

    user = await page.get("/users/alice")
    assert user.status_code == 200
    assert "Alice joue du violoncelle." in user.text
    assert "L&#39;utilisateur a dit" in user.text  # a memory the reflection wrote
    assert "Tu te souviens de mon instrument ?" in user.text
    assert "Salut, moi c&#39;est Bob." not in user.text  # another user's turn

    turn_ids = re.findall(r'href="/users/alice/turns/(\d+)"', user.text)
    assert len(turn_ids) == 3
    latest = await page.get(f"/users/alice/turns/{max(map(int, turn_ids))}")
    assert latest.status_code == 200
    body = latest.text
    assert "Tu te souviens de mon instrument ?" in body
    assert "Alice joue du violoncelle." in body  # chosen, under its reason, with its closeness
    # The same words as /why: the reason's plain words, the closeness in percent, the legend.
    assert "About you in general" in body and "50 % is average" in body
    assert re.search(r'<td class="num">\d{1,2}%</td>', body)
    assert "1 memory chosen out of" in body or "memories chosen out of" in body
    assert "story chan-1" not in body or "<code>chan-1</code>" in body
    for rule in page.engine.character.rules:
        assert rule.replace("'", "&#39;") in body
    assert re.search(r"<strong>Prompt:</strong>\s*[\d,]+ tokens of a 8,192-token context", body)

    # Bob's turn is not Alice's: the id of another user's turn is a missing turn.
    bob = await page.get("/users/bob")
    bob_turn = re.findall(r'href="/users/bob/turns/(\d+)"', bob.text)[0]
    assert (await page.get(f"/users/alice/turns/{bob_turn}")).status_code == 404


async def test_hostile_memory_text_and_user_ids_show_as_text(page: Page):
    hostile_user = '<img src=x onerror=alert(1)>"&'
    await page.engine.memories.remember(hostile_user, "<script>alert('memory')</script>", story_id="s", place="p")
    await page.play("<script>alert('message')</script> bonjour", user=hostile_user, name="Mallory", story="s")
    pages = [await page.get("/"), await page.get("/users/" + quote(hostile_user, safe=""))]
    turn_id = re.findall(r"/turns/(\d+)", pages[1].text)[0]
    pages.append(await page.get(f"/users/{quote(hostile_user, safe='')}/turns/{turn_id}"))
    for response in pages:
        assert response.status_code == 200, response.url
        assert "<script>" not in response.text
        assert "<img src=x" not in response.text
        assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "&lt;script&gt;alert(&#39;memory&#39;)&lt;/script&gt;" in pages[1].text
    assert "&lt;script&gt;alert(&#39;message&#39;)&lt;/script&gt; bonjour" in pages[2].text
    assert "&lt;img src=x onerror=alert(1)&gt;&#34;&amp;" in pages[0].text


async def test_the_page_changes_no_memory(page: Page, store):
    await page.play("Bonjour, je m'appelle Alice.")
    before = [(m.id, m.text, m.times_candidate, m.times_served) for m in await page.store.list("alice")]
    user = await page.get("/users/alice")
    for turn_id in re.findall(r"/turns/(\d+)", user.text):
        await page.get(f"/users/alice/turns/{turn_id}")
    await page.get("/")
    await page.get("/metrics")
    after = [(m.id, m.text, m.times_candidate, m.times_served) for m in await page.store.list("alice")]
    assert before == after and before


async def test_erase_me_removes_the_user_from_the_page(page: Page):
    await page.play("Bonjour, je m'appelle Alice.")
    await page.play("Salut, moi c'est Bob.", user="bob", name="Bob")
    user = await page.get("/users/alice")
    turn_id = re.findall(r"/turns/(\d+)", user.text)[0]
    assert '<a href="/users/alice">Alice</a>' in (await page.get("/")).text

    await page.engine.privacy.erase("alice")

    overview = (await page.get("/")).text
    assert "alice" not in overview and "Alice" not in overview
    assert '<a href="/users/bob">Bob</a>' in overview
    assert (await page.get("/users/alice")).status_code == 404
    assert (await page.get(f"/users/alice/turns/{turn_id}")).status_code == 404


async def test_export_holds_the_turn_figures_the_page_draws(page: Page):
    await page.play("Bonjour, je m'appelle Alice.")
    data = await page.engine.privacy.export("alice")
    [entry] = data["turn_log"]
    assert entry["outcome"] == "answered" and entry["story_id"] == "chan-1"
    assert entry["prompt_tokens"] > 0 and entry["context_tokens"] == 8192 and entry["reply_ms"] is not None


async def test_a_cut_series_and_a_consolidation_show_on_the_page(page: Page):
    for year in (2016, 2017, 2018, 2019, 2020):
        await page.engine.memories.remember(
            "alice", f"Alice a visité Trieste en {year}.", story_id="chan-1", place="guild-1"
        )
    await page.play("On repart en voyage ?")
    user = await page.get("/users/alice")
    [turn_id] = re.findall(r'href="/users/alice/turns/(\d+)"', user.text)
    turn = await page.get(f"/users/alice/turns/{turn_id}")
    assert turn.text.count("(one of a series of 5, cut to its share of slots)") == 3

    remembering = page.llm.handler

    def consolidating(request):  # type: ignore[no-untyped-def]
        if "series" in request.last_user:
            return '{"text": "Alice a visité Trieste chaque année de 2016 à 2020.", "confidence": 0.95}'
        return remembering(request)

    page.llm.handler = consolidating
    figures = await page.engine.operator.consolidate()
    assert figures.consolidated == 1
    user = await page.get("/users/alice")
    assert "Series consolidated (1)" in user.text
    assert "Alice a visité Trieste chaque année de 2016 à 2020." in user.text
    assert "Alice a visité Trieste en 2018." in user.text  # a member, as it was


async def test_the_overview_shows_the_models_context_its_cost_per_call_and_a_context_too_small(page: Page):
    page.llm.replies.append(Reply("Je note.", prompt_tokens=1500, cached_tokens=1200, prompt_ms=300.0))
    await page.play("Bonjour, je m'appelle Alice.")
    overview = (await page.get("/")).text
    card = overview.split("<h2>Language model</h2>", 1)[1].split("</div>", 1)[0]
    assert "ollama, context 8,192 tokens (num_ctx (LLM_CONTEXT_TOKENS))" in card
    assert re.search(
        r"<td>reply</td><td class=\"num\">1</td><td class=\"num\">1,500</td><td class=\"num\">300</td><td class=\"num\">1,200</td><td class=\"num\">80%</td>",
        card,
    ), card
    assert "context too small" not in card
    page.llm.context_tokens = 200  # the server refuses longer prompts, as llama.cpp does
    await page.play("Tu es là ?")
    card = (await page.get("/")).text.split("<h2>Language model</h2>", 1)[1].split("</div>", 1)[0]
    assert "context too small" in card and "the model holds 200" in card


# Ids past a row's range or not ASCII digits: 20 nines could not even be bound (500,
# OverflowError); "１２" and "١٢" are digits to int().
OUTSIDE_IDS = ["9" * 20, str(2**63), "0", "-1", "１２", "١٢", "1e3", " 1", "9" * 400]


async def test_every_id_from_the_url_is_range_checked_and_a_bad_one_is_a_404(page: Page):
    await page.play("Bonjour, je m'appelle Alice.")
    user = await page.get("/users/alice")
    (turn_id,) = set(re.findall(r'href="/users/alice/turns/(\d+)"', user.text))
    assert (await page.get(f"/users/alice/turns/{turn_id}")).status_code == 200  # the control
    for bad in OUTSIDE_IDS:
        response = await page.get(f"/users/alice/turns/{quote(bad)}")
        assert response.status_code == 404, (bad, response.status_code, response.text[:300])
        assert "No turn" in response.text


LORE = """\
budget_chars: 100
entries:
  - name: Port
    keys: [harbour]
    content: The harbour of Vellmar freezes every winter.
    order: 2
  - name: Guild
    keys: ["/guil(d|de) des voleurs/"]
    content: The thieves' guild meets under the fish market, every night but the first of the month.
    order: 1
  - name: Sky
    constant: true
    content: The sky is always green.
"""


async def test_a_turn_page_shows_each_lore_entry_its_key_and_whether_it_went_in(db, tmp_path):
    (tmp_path / "lore.yaml").write_text(LORE, encoding="utf-8")
    (tmp_path / "lina.yaml").write_text(
        "name: Lina\npersona: A sailor of Vellmar.\nlore: lore.yaml\n", encoding="utf-8"
    )
    async with serving(db, tmp_path, load_character(tmp_path / "lina.yaml")) as lina:
        await lina.play("Shall we meet the guild des voleurs at the harbour?")
        user = await lina.get("/users/alice")
        turn_id = re.findall(r'href="/users/alice/turns/(\d+)"', user.text)[0]
        body = (await lina.get(f"/users/alice/turns/{turn_id}")).text
    lore = body[body.index("<h2>Lore</h2>") : body.index("</table>", body.index("<h2>Lore</h2>"))]
    cost = {e.name: len(e.content) for e in lina.engine.character.lore.entries}
    # The same rows as /why: which entry, on which key, in (with its size) or left out and why.
    assert (
        f'<td class="text">Port</td><td class="text">on “harbour”</td><td class="text">in, {cost["Port"]} characters</td>'
        in lore
    )
    assert (
        f'<td class="text">Sky</td><td class="text">always in (constant)</td><td class="text">in, {cost["Sky"]} characters</td>'
        in lore
    )
    assert '<td class="text">Guild</td><td class="text">on “/guil(d|de) des voleurs/”</td>' in lore
    assert "left out: over the lore budget of 100 characters (raise the lorebook&#39;s own budget)" in lore
    system = next(c for c in reversed(lina.llm.chats) if c.json_schema is None).context
    assert "The harbour of Vellmar" in system and "fish market" not in system


async def test_a_turn_page_shows_the_follow_up_of_a_passed_date(db, tmp_path):
    exam = "L'utilisateur a un examen de chimie vendredi"
    # Told two days before its date; the turn comes the day after it (issue 34: the follow-up
    # is a place of its own on the owner's page, as in /why).
    told = utcnow()
    async with serving(db, tmp_path, clock=Clock(told + timedelta(days=3))) as page:
        await page.store.add("alice", NewMemory(text=exam, expires_at=told + timedelta(days=2), place="guild-1"))
        await page.play("Coucou !")
        user = await page.get("/users/alice")
        [turn_id] = re.findall(r'href="/users/alice/turns/(\d+)"', user.text)
        body = (await page.get(f"/users/alice/turns/{turn_id}")).text
    followup = body[body.index("Follow-up — a dated event that has passed") :]
    assert "examen de chimie" in followup[: followup.index("</table>")]
