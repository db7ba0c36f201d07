"""``budgetmix view``: the trajectory viewer in headless Chromium (Debian's ``chromium``), on a
real run with mixed outcomes and faults, on 10,000 episodes, with hostile actions, and served on
loopback. The page's state is its URL fragment, so each check opens a filtered view with an
episode open and reads the DOM Chromium rendered."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import requests
from service_helpers import chromium_flags

from budget_envs.cli import main
from budget_envs.eval.view import PAGE, serve_view, write_view


def _chromium(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    flags = chromium_flags(tmp_path)
    flags += ["--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", *extra, url]
    return subprocess.run(flags, capture_output=True, text=True, timeout=180)


def _dom(url: str, tmp_path: Path) -> str:
    out = _chromium(url, tmp_path, "--dump-dom")
    assert out.returncode == 0, out.stderr[-2000:]
    # No script error: none on the console, none caught by the page.
    assert "Uncaught" not in out.stderr, out.stderr[-2000:]
    assert re.search(r'<div id="errors" hidden="">\s*</div>', out.stdout), out.stdout[-2000:]
    return out.stdout


def _records(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("record", "episode") == "episode"]


def _order(records: list[dict]) -> list[dict]:
    return sorted(
        records,
        key=lambda r: (
            r["env_id"],
            r["agent"],
            r["task_id"],
            r["sample"],
            r["budget"],
            -1 if r["fault_turn"] is None else r["fault_turn"],
        ),
    )


def test_view_a_real_run_filter_open_and_screenshot(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["eval", "BudgetMix/ToolUse-v0", "--env-kwargs", '{"level": 1}', "--tasks", "4"]
    argv += ["--samples", "2", "--budgets", "8", "--fault-turns", "2", "--save-transcripts"]
    argv += ["--agent", "random", "--agent", "eps=oracle:epsilon=0.3", "--out", str(run), "--quiet"]
    assert main(argv) == 0
    assert main(["view", str(run)]) == 0
    assert "index.html" in capsys.readouterr().out
    index = run / "view" / "index.html"
    assert index.is_file() and (run / "view" / "data" / "turns-000.js").is_file()
    page = index.read_text()
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "https://" not in page
    episodes = _order(_records(run))
    won = [r for r in episodes if r["won"]]
    assert won and len(won) < len(episodes)  # mixed outcomes
    # The won episodes with a fault at turn 2, one of them open.
    pick = next(i for i, r in enumerate(episodes) if r["won"] and r["fault_turn"] == 2)
    agent = sorted({r["agent"] for r in episodes}).index(episodes[pick]["agent"])
    url = f"{index.as_uri()}#outcome=won&fault=2&agent={agent}&open={pick}"
    html = _dom(url, tmp_path)
    want = [
        r
        for r in episodes
        if r["won"] and r["fault_turn"] == 2 and r["agent"] == episodes[pick]["agent"]
    ]
    assert f'id="count">{len(want)} of {len(episodes)} episodes' in html
    assert f'<tr data-id="{pick}" class="open">' in html
    assert (
        f'id="ep-title">Episode {pick}: {episodes[pick]["agent"]} on BudgetMix/ToolUse-v0' in html
    )
    turns = re.findall(r'<tr class="turn ([a-z ]*)">', html)
    assert len(turns) == episodes[pick]["turns"]
    assert "fault" in turns[1]  # the fault's turn is marked
    assert "slip" in html or "drop" in html
    assert "First observation" in html and "Support ticket" in html  # from the transcript
    assert "tool <b>" in html  # tool calls shown as calls
    # Charts: a heatmap cell and a budget-curve point each carry their value on hover.
    assert re.search(r"<title>K=1, T=1: \d\.\d{3}</title>", html)
    assert re.search(r"<title>eps T=8: Pass@1 \d\.\d{3} \[", html)
    shot = tmp_path / "view.png"
    out = _chromium(
        f"{index.as_uri()}#open={pick}", tmp_path, f"--screenshot={shot}", "--window-size=1400,1000"
    )
    assert shot.exists(), out.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    assert "Uncaught" not in out.stderr


def _synthetic(n: int) -> list[dict]:
    """``n`` episode records of two agents, 12 turns at most, with faults and hostile actions."""
    hostile = [
        "</script><script>document.title='pwned'</script>",
        "<img src=x onerror=\"document.title='pwned'\">",
        '{"tool_calls": [{"name": "<b>x</b>", "arguments": {"q": "</pre><i>"}}]}',
        "\x00 nul and \u2028 separators",
    ]
    out = []
    for i in range(n):
        turns = 1 + i % 12
        won = i % 3 == 0
        actions = [
            hostile[(i + t) % len(hostile)] if i % 50 == 0 else f"go {t}" for t in range(turns)
        ]
        out.append(
            {
                "env_id": "BudgetMix/ToolUse-v0",
                "agent": "a" if i % 2 else "b",
                "task_id": f"L1-{i // 4:05d}",
                "sample": i % 4,
                "budget": 12,
                "visibility": "hidden",
                "fault_turn": 2 if i % 5 == 0 else None,
                "faults": [{"kind": "drop", "turn": 2, "effect": "dropped"}] if i % 5 == 0 else [],
                "turns": turns,
                "won": won,
                "first_success_turn": turns if won else None,
                "stop_reason": "won" if won else "budget",
                "actions": actions,
                "oracle_agreement": [t % 2 == 0 for t in range(turns)],
                "costs": [max(0, 5 - t) for t in range(turns)],
                "error": None,
                "record": "episode",
                "key": f"k{i}",
            }
        )
    return out


def test_ten_thousand_episodes_and_hostile_actions(tmp_path):
    records = _synthetic(10_000)
    start = time.perf_counter()
    result = write_view(records, tmp_path / "view")
    written = time.perf_counter() - start
    data = tmp_path / "view" / "data"
    sizes = {p.name: p.stat().st_size for p in data.iterdir()}
    pages = [s for name, s in sizes.items() if name.startswith("turns-")]
    assert len(pages) == -(-10_000 // PAGE)
    # The page's files: the list under 1 MB, each turns page under 256 KB.
    assert sizes["episodes.js"] < 1_000_000 and max(pages) < 256_000, sizes
    order = _order([dict(r, fault_turn=r["fault_turn"]) for r in records])
    hostile = next(i for i, r in enumerate(order) if r["key"] == "k100")  # 5 hostile turns
    start = time.perf_counter()
    html = _dom(f"{result.index.as_uri()}#open={hostile}", tmp_path)
    loaded = time.perf_counter() - start
    print(
        f"\n10,000 episodes: written in {written:.2f} s ({result.size / 1e6:.1f} MB); "
        f"Chromium load, render and dump (one episode open) in {loaded:.2f} s"
    )
    assert 'id="count">10000 of 10000 episodes (the first 500 listed)' in html
    assert len(re.findall(r"<tr data-id=\"\d+\"", html)) == 500
    assert "<title>pwned</title>" not in html and "pwned</title>" not in html.split("<body")[0]
    # Every hostile action shows as text.
    assert "&lt;/script&gt;&lt;script&gt;" in html and "&lt;img src=x onerror" in html
    assert "<img src=" not in html
    # Filters over the whole list (not only what is listed).
    html = _dom(f"{result.index.as_uri()}#outcome=won&fault=none&agent=0", tmp_path)
    want = sum(1 for r in records if r["won"] and r["fault_turn"] is None and r["agent"] == "a")
    assert f'id="count">{want} of 10000 episodes' in html


def test_view_serves_on_loopback(tmp_path):
    write_view(_synthetic(30), tmp_path / "view")
    server = serve_view(tmp_path / "view")
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        page = requests.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200 and "VIEW.meta" in page.text
        meta = requests.get(f"http://127.0.0.1:{port}/data/meta.js", timeout=10)
        assert meta.status_code == 200 and meta.text.startswith("VIEW.meta(")
        assert (
            requests.get(f"http://127.0.0.1:{port}/../../etc/passwd", timeout=10).status_code == 404
        )
    finally:
        server.shutdown()
        server.server_close()


def test_view_of_an_empty_or_missing_run_is_one_line(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert "no records" in capsys.readouterr().err
