"""BudgetMix/WebShop-v0: catalogue, tasks, oracle, HTTP server security, concurrency, browser."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import warnings
import zlib

import gymnasium as gym
import numpy as np
import pytest
import requests
from service_helpers import chromium_flags

import budget_envs  # noqa: F401  (registers the ids)
from budget_envs.core import UNREACHABLE
from budget_envs.envs.webshop import WebShopEnv, WebShopServerError
from budget_envs.envs.webshop.catalogue import generate_catalogue
from budget_envs.envs.webshop.scoring import (
    normalize_color,
    product_record,
    score_item,
    token_set_ratio,
)
from budget_envs.envs.webshop.server import ShopServer
from budget_envs.envs.webshop.shop import get_shop
from budget_envs.envs.webshop.tasks import LEVELS

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server():
    srv = ShopServer.start(seed=0)
    yield srv
    srv.stop()


@pytest.fixture()
def env(server):
    e = WebShopEnv(base_url=server.base_url)
    yield e
    e.close()


def _fingerprint(n_tasks: int = 3) -> str:
    """A hash of the whole catalogue and a few tasks per level (compared across processes)."""
    shop = get_shop(0)
    h = hashlib.sha256()
    for p in shop.products:
        h.update(json.dumps(product_record(p), sort_keys=True).encode())
        h.update(json.dumps(p.options, sort_keys=True).encode())
    for lv in LEVELS:
        for i in range(n_tasks):
            h.update(json.dumps(shop.task(f"L{lv}-{i:04d}").to_dict(), sort_keys=True).encode())
    h.update(json.dumps(shop.search_asins("sulfate free shampoo 16 fl oz")).encode())
    return h.hexdigest()


def _raw(server, method: str, target: str, body: bytes = b"", headers=None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body or method in ("POST", "PUT"):
            if "Transfer-Encoding" not in (headers or {}):
                conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body:
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ---------------------------------------------------------------------------- catalogue, tasks
def test_catalogue_size_and_fields():
    products = get_shop(0).products
    assert len(products) >= 10_000
    assert len({p.asin for p in products}) == len(products)
    cats = {p.spec.category for p in products}
    assert cats == {"beauty", "food", "fashion", "furniture", "electronics"}
    for p in products[:200]:
        assert p.options and p.attributes and p.bullets and p.description and p.price > 0
        values = [v for vals in p.options.values() for v in vals]
        assert len(values) == len(set(values)), "option values must be unique within a product"


def test_same_catalogue_and_tasks_in_another_process():
    here = _fingerprint()
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from test_webshop import _fingerprint\nprint(_fingerprint())\n" % str(ROOT / "tests")
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=str(ROOT),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == here


def test_other_seed_other_catalogue():
    a = generate_catalogue(0, 1000)
    b = generate_catalogue(1, 1000)
    assert [p.title for p in a] != [p.title for p in b]
    assert [p.title for p in a] == [p.title for p in generate_catalogue(0, 1000)]


@pytest.mark.parametrize("level", LEVELS)
def test_tasks_have_a_unique_correct_answer(level):
    shop = get_shop(0)
    for i in range(6):
        task = shop.task(f"L{level}-{i:04d}")
        assert task.instruction.startswith("i ")
        for item in task.items:
            goal = {
                "query": item.query,
                "product_category": item.product_category,
                "name": item.name,
                "attributes": item.attributes,
                "goal_options": list(item.goal_options.values()),
            }
            perfect = []
            for p in shop.by_type[shop.product(item.asin).type_index]:
                chosen = {}
                for d, v in item.goal_options.items():
                    if v in p.options.get(d, ()):
                        chosen[d] = v
                price_ok = p.price <= item.price_upper if not task.multi else True
                if score_item("exact", product_record(p), goal, chosen, price_ok) == 1.0:
                    perfect.append(p.asin)
            assert perfect == [item.asin]


def test_levels_span_the_turn_ranges():
    shop = get_shop(0)
    turns = {lv: [shop.task(f"L{lv}-{i:04d}").optimal_turns() for i in range(8)] for lv in LEVELS}
    assert set(turns[1]) <= {3, 4}
    assert all(t == 5 for t in turns[2])
    assert all(8 <= t <= 12 for t in turns[4])
    assert all(15 <= t <= 35 for t in turns[5])
    l3 = [shop.task(f"L3-{i:04d}") for i in range(8)]
    assert all(t.items[0].natural_page >= 2 and t.items[0].near_misses >= 2 for t in l3)


# ---------------------------------------------------------------------------- oracle
@pytest.mark.parametrize("level", LEVELS)
def test_oracle_solves_every_level_in_cost_to_go(env, level):
    for i in range(4):
        obs, info = env.reset(options={"task_id": f"L{level}-{i:04d}"})
        need = env.cost_to_go()
        assert need == env._task.optimal_turns()
        turns = 0
        while not env.done:
            acts = env.oracle_actions()
            assert acts
            assert env.cost_to_go() == need - turns
            obs, reward, terminated, truncated, info = env.step(acts[0])
            assert not info["invalid_action"], obs
            turns += 1
        assert turns == need and reward == 1.0 and info["won"] and info["score"] == 1.0
        assert env.oracle_actions() == [] and env.cost_to_go() == 0


@pytest.mark.parametrize("level", [1, 3, 4, 5])
def test_oracle_is_exact_after_detours(env, level):
    rng = np.random.default_rng(level)
    for i in range(3):
        obs, info = env.reset(options={"task_id": f"L{level}-{i + 10:04d}"})
        for _ in range(int(rng.integers(2, 9))):
            action = env.sample_action(rng)
            if action in ("click[buy now]", "click[checkout]"):
                continue
            obs, reward, terminated, truncated, info = env.step(action)
        need = env.cost_to_go()
        turns = 0
        while not env.done:
            for a in env.oracle_actions():  # every listed action is optimal
                snap = env.snapshot()
                env.step(a)
                assert env.cost_to_go() == need - turns - 1 or env.won
                env.restore(snap)
            env.step(env.oracle_actions()[0])
            turns += 1
        assert env.won and turns == need


def test_wrong_purchase_loses_with_partial_score(env):
    env.reset(options={"task_id": "L2-0001"})
    task = env._task
    env.step(f"search[{task.items[0].title_query}]")
    env.step(f"click[{task.items[0].asin.lower()}]")
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    assert terminated and not info["won"] and info["lost"]
    assert 0.0 < reward < 1.0 and info["score"] == reward
    assert env.cost_to_go() == UNREACHABLE and env.oracle_actions() == []
    purchase = info["purchase"]
    assert set(purchase["goal"]) >= {
        "query",
        "product_category",
        "name",
        "attributes",
        "goal_options",
        "price_upper",
    }
    assert set(purchase["product"]) >= {
        "query",
        "product_category",
        "name",
        "Title",
        "Attributes",
        "BulletPoints",
        "Description",
    }
    assert isinstance(purchase["product"]["BulletPoints"], list)
    assert purchase["options"] == {} and purchase["price"] == purchase["product"]["Price"]


def test_cart_purchase_record(env):
    env.reset(options={"task_id": "L4-0002"})
    while not env.done:
        obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
    purchase = info["purchase"]
    assert len(purchase["items"]) == 2 and purchase["total"] <= purchase["spending_limit"]
    assert all(r["reward"] == 1.0 for r in purchase["items"])


# ---------------------------------------------------------------------------- actions, view
def test_text_view_and_admissible(env):
    obs, info = env.reset(options={"task_id": "L1-0003"})
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] i ")
    assert obs.endswith("[button] Search [button_]")
    assert info["admissible_actions"] == ["search[...]"]
    obs, *_, info = env.step("search[shampoo]")
    assert "click[next >]" in info["admissible_actions"]
    assert sum(a.startswith("click[b0") for a in info["admissible_actions"]) == 10
    item = next(a for a in info["admissible_actions"] if a.startswith("click[b0"))
    obs, *_, info = env.step(item.upper().replace("CLICK", "click"))  # case-insensitive
    assert not info["invalid_action"]
    for a in (
        "click[buy now]",
        "click[description]",
        "click[features]",
        "click[reviews]",
        "click[attributes]",
        "click[< prev]",
        "click[back to search]",
    ):
        assert a in info["admissible_actions"]
    obs, *_, info = env.step("click[attributes]")
    assert "click[< prev]" in info["admissible_actions"]


@pytest.mark.parametrize(
    "bad",
    [
        "click[no such button]",
        "search[shampoo]",
        "buy it",
        "click[]",
        "search[]",
        "click[" + "x" * 3000 + "]",
        "<script>alert(1)</script>",
        "'; DROP TABLE docs; --",
        'search[" OR 1=1 --]',
        "click[b0]",
    ],
)
def test_invalid_actions_leave_the_state(env, bad):
    env.reset(options={"task_id": "L2-0004"})
    env.step("search[shampoo]")
    before = (env.unwrapped._state, env.cost_to_go(), env.unwrapped._view)
    obs, reward, terminated, truncated, info = env.step(bad)
    assert info["invalid_action"] and reward == 0.0 and not terminated
    assert (env.unwrapped._state, env.cost_to_go(), env.unwrapped._view) == before
    assert obs.startswith("Invalid action")


#: The digest of :func:`_mixed_transcript` recorded before the HTTP path was made leaner
#: (requests.Session replaced by one kept-alive http.client connection): the same
#: observations, rewards, flags, info (``state_hash`` included) to the byte.
MIXED_TRANSCRIPT_SHA256 = "a9606a147ac91dab4ee28c52dfa8b50c42d99f9a63c18bd5260e415cbe8f55d0"


def _mixed_transcript(env, seed: int = 7, episodes: int = 6) -> tuple[str, list[str]]:
    """A seeded stream of episodes on random level-2 tasks, as a training client plays them:
    oracle steps, random picks among ``info["candidate_actions"]``, invalid clicks and random
    admissible actions. Returns the SHA-256 of every turn (JSON) and the actions played."""
    rng = np.random.default_rng(seed)
    h = hashlib.sha256()
    played: list[str] = []

    def put(x):
        h.update(json.dumps(x, sort_keys=True, default=repr).encode())
        h.update(b"\n")

    for _ in range(episodes):
        tid = env.task_ids[int(rng.integers(len(env.task_ids)))]
        obs, info = env.reset(seed=int(rng.integers(1 << 30)), options={"task_id": tid})
        put([obs, info])
        for _ in range(25):
            u = rng.random()
            if u < 0.3:
                action = env.oracle_actions()[0]
            elif u < 0.8:
                cands = info["candidate_actions"]
                action = cands[int(rng.integers(len(cands)))]
            elif u < 0.9:
                action = "click[no such button]"
            else:
                action = env.sample_action(rng)
            out = env.step(action)
            put([action, *out])
            played.append(action)
            info = out[4]
            if out[2] or out[3]:
                break
    return h.hexdigest(), played


def test_a_seeded_mixed_episode_stream_gives_the_recorded_transcript(server):
    env = WebShopEnv(base_url=server.base_url, level=2)
    digest, played = _mixed_transcript(env)
    env.close()
    # what the stream covers: searches, clicks, invalid turns and purchases
    assert {a.split("[", 1)[0] for a in played} == {"search", "click"}
    assert "click[no such button]" in played and "click[buy now]" in played
    assert digest == MIXED_TRANSCRIPT_SHA256


def test_an_action_over_the_shops_request_limit_is_an_invalid_turn(env):
    # 5,461 astral characters pass the core's length check but take 65,532 bytes as JSON:
    # the server would answer 413. The env refuses it as a turn, faulty or not (an http_error
    # fault drops the turn before the action counts, as for any action).
    env.reset(options={"task_id": "L1-0000"})
    before = env.current_info()["state_hash"]
    for fault in (None, "stale_page", "out_of_stock", "http_error"):
        if fault is not None:
            env.arm_fault(fault, np.random.default_rng(0))
        obs, reward, terminated, truncated, info = env.step("\U00010000" * 5461)
        if fault == "http_error":
            assert info["fault"]["effect"] == "dropped" and obs.startswith("HTTP 5")
        else:
            assert info["invalid_action"] and "over the shop's limit" in obs, fault
        assert info["state_hash"] == before and reward == 0.0 and not terminated
    # ASCII up to the core's limit fits the request: the shop itself answers it.
    obs = env.step("search[" + "shampoo " * 2000 + "]")[0]
    assert "over the shop's limit" not in obs and env.current_info()["state_hash"] == before


def test_search_survives_fts_syntax(env):
    env.reset(options={"task_id": "L1-0000"})
    for q in ['" OR "', "NEAR(a b)", "shampoo AND", "*", "col:title", "'; DROP TABLE docs; --"]:
        obs, *_, info = env.step(f"search[{q}]")
        assert not info["invalid_action"], obs
        env.step("click[back to search]")


# ---------------------------------------------------------------------------- scoring
def test_token_set_ratio_and_colours():
    assert token_set_ratio("pack of 12", "pack of 24") == pytest.approx(90.0)
    assert round(token_set_ratio("6 ounce", "16 ounce")) == 93
    assert token_set_ratio("x-large", "large") == 100.0
    assert token_set_ratio("Sulfate Free", "free sulfate") == 100.0
    assert token_set_ratio("", "x") == 0.0
    assert normalize_color("standard") == "tan"
    assert normalize_color("dark grey") == "dark"
    assert normalize_color("light blue") == "blue"


def test_scoring_modes_differ_where_documented():
    shop = get_shop(0)
    task = shop.task("L1-0000")
    item = task.items[0]
    target = shop.product(item.asin)
    goal = {
        "query": item.query,
        "product_category": item.product_category,
        "name": item.name,
        "attributes": item.attributes,
        "goal_options": list(item.goal_options.values()),
    }
    rec = product_record(target)
    assert score_item("exact", rec, goal, item.goal_options, True) == 1.0
    assert score_item("webshop", rec, goal, item.goal_options, True, target.brand) == 1.0
    # a near option ("pack of 12" vs "pack of 24") is a hit only under WebShop's fuzzy matching
    g2 = dict(goal, goal_options=["pack of 12"], attributes=[item.attributes[0]])
    exact = score_item("exact", rec, g2, {"size": "pack of 24"}, True)
    fuzzy = score_item("webshop", rec, g2, {"size": "pack of 24"}, True, target.brand)
    assert exact == pytest.approx(2 / 3) and fuzzy == 1.0
    # no attributes and no price bound: no division by zero
    g3 = dict(goal, attributes=[], goal_options=[])
    assert score_item("exact", rec, g3, {}, None) == 1.0
    # another type in another category scores 0 in both modes
    other = next(p for p in shop.products if p.spec.category != target.spec.category)
    assert score_item("exact", product_record(other), goal, {}, True) == 0.0
    assert score_item("webshop", product_record(other), goal, {}, True, target.brand) == 0.0
    with pytest.raises(ValueError, match="scoring"):
        score_item("fuzzy", rec, goal, {}, True)


def test_webshop_scoring_env(server):
    e = WebShopEnv(base_url=server.base_url, scoring="webshop", level=1)
    e.reset(options={"task_id": 0})
    while not e.done:
        obs, reward, term, trunc, info = e.step(e.oracle_actions()[0])
    assert info["won"] and reward == 1.0
    e.close()


# ---------------------------------------------------------------------------- faults, snapshots
def test_faults(env):
    rng = np.random.default_rng(0)
    env.reset(options={"task_id": "L2-0005"})
    view, cost = env._view, env.cost_to_go()
    env.arm_fault("http_error", rng)
    obs, _, _, _, info = env.step(env.oracle_actions()[0])
    assert obs.startswith(("HTTP 500", "HTTP 503")) and info["fault"]["executed"] == ""
    assert info["fault"]["effect"] == "dropped" and info["turn"] == 1
    assert env.cost_to_go() == cost and env._view == view
    action = env.oracle_actions()[0]
    env.arm_fault("stale_page", rng)
    obs, _, _, _, info = env.step(action)
    assert obs == view and info["fault"]["executed"] == action and env.cost_to_go() == cost - 1
    assert env._view != view  # the agent saw the old page; the env keeps the real one
    action = env.oracle_actions()[0]
    env.arm_fault("slow_response", rng)
    obs, _, _, _, info = env.step(action)
    assert "s to load" in obs and env.cost_to_go() == cost - 2
    assert info["fault"]["effect"] == "observation"
    with pytest.raises(ValueError, match="unknown fault"):
        env.arm_fault("meteor", rng)


def test_snapshot_restore_through_the_server(server, env):
    env.reset(options={"task_id": "L4-0001"})
    for _ in range(3):
        env.step(env.oracle_actions()[0])
    snap = env.snapshot()
    cost = env.cost_to_go()
    first = [env.step(env.oracle_actions()[0])[0] for _ in range(2)]
    env.restore(snap)
    assert env.cost_to_go() == cost
    assert [env.step(env.oracle_actions()[0])[0] for _ in range(2)] == first
    # a snapshot restores into another env's session on the same server
    other = WebShopEnv(base_url=server.base_url)
    other.reset(options={"task_id": "L1-0000"})
    assert other.restore(snap) == snap.observation
    assert other.cost_to_go() == cost and other.task_id == "L4-0001"
    other.close()


def test_restore_rejects_forged_state(server, env):
    env.reset(options={"task_id": "L1-0000"})
    sid = env._sid
    url = f"{server.base_url}/api/sessions/{sid}"
    state = dict(env._state)
    for forged in (
        dict(state, page="item", asin="../../etc/passwd"),
        dict(state, results=["NOPE"] * 3),
        dict(state, page_no=99),
        dict(state, scoring="lenient"),
        dict(state, task_id="L9-0000"),
        dict(state, cart=[{"asin": "x", "options": {}}]),
        "not a dict",
    ):
        r = requests.put(url, json={"state": forged}, timeout=5)
        assert r.status_code == 400, forged
    assert requests.get(url, timeout=5).json()["state"] == state


# ---------------------------------------------------------------------------- server, security
def test_loopback_by_default_and_base_url():
    e = WebShopEnv(level=1)
    e.reset(seed=0)
    assert e.base_url.startswith("http://127.0.0.1:")
    assert e.server.host == "127.0.0.1"
    e.close()
    assert e.server is None


@pytest.mark.parametrize(
    "target",
    [
        "/../../etc/passwd",
        "/web/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/api/sessions/..%2f..%2fetc",
        "/api/tasks/..%2F..%2Fetc%2Fpasswd",
        "/static/../app.py",
        "/web/%00",
        "/api/sessions/%ff%fe",
        "//etc/passwd",
        "/api/",
        "/api/tasks/L9-0000",
        "/api/tasks/" + "L1-" + "9" * 40,
        "/web/" + "A" * 100,
        "/web/short",
    ],
)
def test_malformed_and_traversal_urls_get_404(server, target):
    status, body = _raw(server, "GET", target)
    assert status == 404
    assert b"root:" not in body and b"import" not in body


def test_bad_requests_get_4xx(server):
    assert _raw(server, "GET", "/" + "a" * 5000)[0] == 414
    assert _raw(server, "POST", "/api/sessions", b"{bad json")[0] == 400
    assert _raw(server, "POST", "/api/sessions", b"[1, 2]")[0] == 400
    assert _raw(server, "POST", "/api/sessions", b'{"task_id": 5}')[0] == 400
    bad_scoring = b'{"task_id": "L1-0000", "scoring": "x"}'
    assert _raw(server, "POST", "/api/sessions", bad_scoring)[0] == 400
    assert _raw(server, "POST", "/api/sessions", b"\xff\xfe\x00")[0] == 400
    assert _raw(server, "POST", "/api/sessions", b"x" * 70_000)[0] == 413
    assert _raw(server, "POST", "/api/sessions", b"", {"Content-Length": "-5"})[0] == 400
    assert _raw(server, "POST", "/api/sessions", b"", {"Content-Length": "abc"})[0] == 400
    assert (
        _raw(server, "POST", "/api/sessions", b"0\r\n\r\n", {"Transfer-Encoding": "chunked"})[0]
        == 411
    )
    assert _raw(server, "DELETE", "/api/info")[0] == 405
    assert _raw(server, "PATCH", "/")[0] == 405
    assert _raw(server, "GET", "/api/sessions")[0] == 405
    r = requests.post(f"{server.base_url}/api/sessions", json={"task_id": "L1-0000"}, timeout=5)
    sid = r.json()["sid"]
    step = f"/api/sessions/{sid}/step"
    assert _raw(server, "POST", step, b'{"action": 5}')[0] == 400
    assert _raw(server, "POST", step, b'{"action": "x", "fault": {"kind": "boom"}}')[0] == 400
    assert (
        _raw(
            server,
            "POST",
            step,
            b'{"action": "x", "fault": {"kind": "slow_response", "delay_ms": 99999}}',
        )[0]
        == 400
    )
    assert (
        _raw(
            server, "POST", step, b'{"action": "x", "fault": {"kind": "http_error", "status": 200}}'
        )[0]
        == 400
    )
    # the server still answers normally afterwards
    assert requests.get(f"{server.base_url}/api/info", timeout=5).status_code == 200


def test_html_escapes_what_users_and_products_type(server):
    s = requests.Session()
    r = s.post(
        f"{server.base_url}/web/new", data={"task": "L1-0000"}, timeout=5, allow_redirects=False
    )
    assert r.status_code == 303
    page_url = server.base_url + r.headers["Location"]
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    r = s.post(page_url, data={"q": evil}, timeout=5)
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in r.text
    assert "default-src 'none'" in r.headers["Content-Security-Policy"]
    r = s.post(f"{server.base_url}/web/new", data={"task": "<b>L1</b>"}, timeout=5)
    assert r.status_code == 400 and "<b>" not in r.text


def test_sessions_are_isolated(server):
    base = server.base_url
    a = requests.post(f"{base}/api/sessions", json={"task_id": "L1-0001"}, timeout=5).json()
    b = requests.post(f"{base}/api/sessions", json={"task_id": "L1-0002"}, timeout=5).json()
    assert a["sid"] != b["sid"] and len(a["sid"]) >= 22
    requests.post(
        f"{base}/api/sessions/{a['sid']}/step", json={"action": "search[shampoo]"}, timeout=5
    )
    got_b = requests.get(f"{base}/api/sessions/{b['sid']}", timeout=5).json()
    assert got_b["state"]["page"] == "search" and got_b["state"]["task_id"] == "L1-0002"
    assert "shampoo" not in json.dumps(got_b)
    # guessing an id gets nothing
    assert requests.get(f"{base}/api/sessions/{'A' * 22}", timeout=5).status_code == 404
    assert requests.get(f"{base}/web/{'A' * 22}", timeout=5).status_code == 404
    # deleting one session leaves the other
    assert requests.delete(f"{base}/api/sessions/{a['sid']}", timeout=5).status_code == 204
    assert requests.get(f"{base}/api/sessions/{a['sid']}", timeout=5).status_code == 404
    assert requests.get(f"{base}/api/sessions/{b['sid']}", timeout=5).status_code == 200


def _run_interleaved(base_url: str, task_ids, errors: list) -> None:
    """One session per task, all open at once, stepped round-robin with the oracle."""
    envs = []
    try:
        for tid in task_ids:
            e = WebShopEnv(base_url=base_url)
            obs, info = e.reset(options={"task_id": tid})
            envs.append([e, tid, info["goal"], e.cost_to_go(), 0, info])
        live = list(envs)
        while live:
            for rec in list(live):
                e, tid, goal, need, turns, _ = rec
                obs, reward, term, trunc, info = e.step(e.oracle_actions()[0])
                rec[4] += 1
                rec[5] = info
                if info["task_id"] != tid or info["goal"] != goal or (not term and goal not in obs):
                    errors.append(f"{tid}: saw another session's page")
                if term:
                    live.remove(rec)
        for e, tid, goal, need, turns, info in envs:
            if not (info["won"] and turns == need):
                errors.append(f"{tid}: won={info['won']} turns={turns} need={need}")
    except Exception as exc:  # reported to the main thread
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        for rec in envs:
            rec[0].close()


def test_100_concurrent_sessions_threads_and_processes(server):
    """100 sessions open at once in 10 threads, plus 2 processes with 10 more each."""
    shop = get_shop(0)
    ids = [f"L{lv}-{i:04d}" for i in range(20) for lv in (1, 2, 3, 4, 5)]
    for t in ids:  # warm the task cache: the test is about sessions, not task generation
        shop.task(t)
    code = (
        "import sys, json; sys.path.insert(0, %r)\n"
        "from test_webshop import _run_interleaved\n"
        "errors = []\n_run_interleaved(sys.argv[1], sys.argv[2].split(','), errors)\n"
        "print(json.dumps(errors))\n" % str(ROOT / "tests")
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, server.base_url, ",".join(ids[k::2][:10])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )
        for k in range(2)
    ]
    errors: list[str] = []
    threads = [
        threading.Thread(target=_run_interleaved, args=(server.base_url, ids[k::10], errors))
        for k in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        errors += json.loads(out.strip().splitlines()[-1])
    assert errors == []


# ---------------------------------------------------------------------------- server death
def test_dead_own_server_is_restarted_mid_episode_and_on_reset():
    e = WebShopEnv(level=1)
    e.reset(seed=0)
    url = e.base_url
    e.server.stop()
    obs, _, _, _, info = e.step("search[shampoo]")  # the env owns its server: step restarts it
    assert e.base_url != url and e.server.alive and not info["invalid_action"]
    e.server.stop()
    obs, info = e.reset(seed=1)  # and so does reset
    assert e.server.alive and obs.startswith("WebShop")
    e.step(e.oracle_actions()[0])
    new_url = e.restart_server()
    assert new_url == e.base_url
    e.reset(seed=2)
    e.close()


def test_unreachable_base_url_raises_with_url():
    srv = ShopServer.start(seed=0)
    url = srv.base_url
    srv.stop()
    e = WebShopEnv(base_url=url)
    with pytest.raises(WebShopServerError, match=url.replace(".", r"\.")):
        e.reset(seed=0)
    with pytest.raises(WebShopServerError, match="does not own"):
        e.restart_server()
    e.close()


def test_catalogue_seed_mismatch_is_refused(server):
    e = WebShopEnv(base_url=server.base_url, catalogue_seed=7)
    with pytest.raises(WebShopServerError, match="catalogue_seed=7"):
        e.reset(seed=0)
    e.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": 6},
        {"level": True},
        {"level": []},
        {"tasks_per_level": 0},
        {"num_products": 10},
        {"scoring": "fuzzy"},
        {"base_url": "ftp://x"},
        {"timeout": 0},
        {"catalogue_seed": "0"},
    ],
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises((ValueError, TypeError), match=re.escape(repr(next(iter(kwargs.values()))))):
        WebShopEnv(**kwargs)


def test_gym_make_default_budget():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = gym.make("BudgetMix/WebShop-v0", level=5)
    obs, info = e.reset(seed=0)
    assert info["budget"]["limit"] == 40 and e.unwrapped.cost_to_go() <= 35
    e.close()


# ---------------------------------------------------------------------------- CLI and export
def test_serve_web_cli_and_export(tmp_path):
    code = (
        "import sys; from budget_envs.envs.webshop.cli import serve_main; "
        "sys.exit(serve_main(['--port', '0', '--seed', '0']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line + proc.stderr.read()[-2000:]
        url = line.strip().split(" at ")[-1]
        e = WebShopEnv(base_url=url, level=2)
        e.reset(seed=0)
        while not e.done:
            *_, info = e.step(e.oracle_actions()[0])
        assert info["won"] and e.base_url == url
        e.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    from budget_envs.envs.webshop.cli import export_main

    assert export_main([str(tmp_path), "--tasks-per-level", "3"]) == 0
    items = json.loads((tmp_path / "items_shuffle.json").read_text())
    assert len(items) == 10_000
    assert {
        "asin",
        "name",
        "full_description",
        "small_description",
        "pricing",
        "customization_options",
        "category",
        "query",
        "product_category",
    } <= set(items[0])
    assert items[0]["pricing"].startswith("$")
    ins = json.loads((tmp_path / "items_ins_v2.json").read_text())
    human = json.loads((tmp_path / "items_human_ins.json").read_text())
    assert len(ins) >= 1 and sum(len(v) for v in human.values()) == 9
    entry = next(iter(human.values()))[0]
    assert {"instruction", "instruction_attributes", "instruction_options"} <= set(entry)


# ---------------------------------------------------------------------------- real browser
def test_headless_chromium_shows_item_page(server, env, tmp_path):
    """Chromium (Debian package ``chromium``) renders an item page: product, options, buy."""
    env.reset(options={"task_id": "L2-0000"})
    item = env._task.items[0]
    env.step(env.oracle_actions()[0])
    env.step(env.oracle_actions()[0])
    url = f"{env.base_url}/web/{env._sid}"
    flags = chromium_flags(tmp_path)
    shot = tmp_path / "item.png"
    out = subprocess.run(
        flags + [f"--screenshot={shot}", "--window-size=1000,900", url],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists(), out.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    title = item.name.replace("&", "&amp;")
    assert title in html
    for value in item.goal_options.values():
        assert f">{value}</button>" in html or f'class="clicked">{value}</button>' in html
    assert ">Buy Now</button>" in html
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 800 and height >= 600
    # not a blank page: the decoded image data holds many distinct byte values
    pos, idat = 8, b""
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    assert len(set(zlib.decompress(idat))) > 40


@pytest.mark.parametrize(
    ("raw", "status", "body", "close"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 200, b"{}", False),
        (
            b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
            404,
            b"x",
            True,
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, b"x", True),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
            200,
            b"x",
            False,
        ),
        (b"HTTP/1.1 200 OK\r\n\r\nto the end", 200, b"to the end", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", False),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n",
            200,
            b"abcde",
            False,
        ),
    ],
)
def test_the_env_connection_reads_any_framing_of_an_answer(raw, status, body, close):
    import io

    from budget_envs.envs.webshop.client import _read_answer

    assert _read_answer(io.BytesIO(raw), "GET") == (status, body, close)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    ],
)
def test_a_cut_or_malformed_answer_raises_an_http_error(raw):
    import http.client
    import io

    from budget_envs.envs.webshop.client import _read_answer

    with pytest.raises(http.client.HTTPException):
        _read_answer(io.BytesIO(raw), "GET")
