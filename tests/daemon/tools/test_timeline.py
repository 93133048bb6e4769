"""`--timeline`: decisions as marks per workload (a preemption marking its victim too), GPU
use per host as changes that replay to the exact picture at any seq, the text account, and
the self-contained page, drawn by a real headless browser."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.tools import timeline as timeline_module
from daemon.tools.timeline import render, timeline, workload_of
from daemon.tools.timeline_page import render_html
from events.objects import Job, JobSet, Pod
from events.state import empty_state
from events.store import EventLog
from tests.browser import Elements, dump_dom
from tests.events.replay_story import PREEMPTED, Story, owner, story, write

pytestmark = pytest.mark.anyio

LOW, HIGH, OTHER = "Job/c1/ns/low", "Job/c1/ns/high", "Job/c1/ns/other"


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Story]:
    path = tmp_path_factory.mktemp("story") / "log.db"
    s = story()
    anyio.run(write, path, s.events)
    return path, s


async def _timeline(path: Path, **kwargs: Any) -> dict[str, Any]:
    async with EventLog.open(path, readonly=True) as log:
        return await timeline(log, **kwargs)


def _index(data: dict[str, Any]) -> dict[str, int]:
    return {w["ref"]: i for i, w in enumerate(data["workloads"])}


def _picture(data: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``host -> {workload: GPUs}`` of the picture the data carries."""
    names = [w["ref"] for w in data["workloads"]]
    return {
        data["hosts"][host]["node"]: {names[w]: n for w, n in pairs}
        for host, _, _, pairs in data["picture"]
    }


def _replayed(data: dict[str, Any], seq: int) -> list[list[Any]]:
    """What the page's script does: the starting cells, then each change up to `seq`."""
    cells = {c[0]: c[1:] for c in data["initial"]}
    for change in data["changes"]:
        if change[0] > seq:
            break
        cells[change[2]] = change[3:]
    return [[host, *cells[host]] for host in sorted(cells)]


async def test_marks_per_workload_and_the_preemption_on_both_rows(
    told: tuple[Path, Story],
) -> None:
    path, s = told
    data = await _timeline(path)
    index = _index(data)
    marks = {(m["seq"], m["w"]): m for m in data["marks"]}
    assert marks[s.seqs["admit"], index[LOW]]["cat"] == "admitted"
    assert marks[s.seqs["refuse"], index[HIGH]]["cat"] == "not-admitted"
    assert marks[s.seqs["preempt"], index[HIGH]]["cat"] == "preempting"
    victim = marks[s.seqs["preempt"], index[LOW]]
    assert (victim["cat"], victim["by"], victim["reason"]) == ("preempted", index[HIGH], PREEMPTED)
    assert marks[s.seqs["restart"], index[LOW]]["cat"] == "restarted"
    assert data["first_seq"] == 1
    assert data["last_seq"] == data["at"] == len(s.events)


async def test_the_picture_at_the_end_and_at_a_chosen_seq(told: tuple[Path, Story]) -> None:
    path, s = told
    end = await _timeline(path)
    assert _picture(end) == {"h1": {}, "h2": {LOW: 4}, "h3": {}, "h4": {OTHER: 4}}
    assert end["workloads"][_index(end)[LOW]]["peak"] == 8
    before = await _timeline(path, at=s.seqs["low-0-deleting"])
    assert _picture(before) == {"h1": {LOW: 4}, "h2": {LOW: 4}, "h3": {}, "h4": {OTHER: 4}}
    assert [h["path"] for h in end["hosts"]] == [
        ["b1", "r1", "h1"],
        ["b1", "r1", "h2"],
        ["b1", "r2", "h3"],
        ["b1", "r2", "h4"],
    ]


@pytest.mark.parametrize("from_seq", [1, 12])
async def test_the_changes_replay_to_the_picture_at_every_seq(
    told: tuple[Path, Story], from_seq: int
) -> None:
    """The page draws any seq by replaying the changes onto the starting cells; that must
    give what folding the log to that seq gives (starting mid-log too)."""
    path, s = told
    whole = await _timeline(path, from_seq=from_seq)
    seqs = sorted({c[0] for c in whole["changes"]} | {from_seq - 1, s.seqs["preempt"]})
    for seq in seqs:
        exact = await _timeline(path, from_seq=from_seq, at=seq)
        assert _replayed(whole, seq) == exact["picture"], seq


async def test_a_cut_history_still_draws_the_chosen_seq_exactly(
    told: tuple[Path, Story], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, s = told
    monkeypatch.setattr(timeline_module, "MAX_CHANGES", 2)
    data = await _timeline(path, at=s.seqs["low-0-gone"])
    assert data["changes_cut"]
    assert len(data["changes"]) == 2
    assert _picture(data) == {"h1": {}, "h2": {LOW: 4}, "h3": {}, "h4": {OTHER: 4}}


async def test_daemon_starts_in_the_range_are_listed(told: tuple[Path, Story]) -> None:
    path, s = told
    whole = await _timeline(path)
    later = await _timeline(path, from_seq=s.seqs["start"] + 1)
    assert [(d["seq"], d["version"], d["rules"]) for d in whole["daemon_starts"]] == [
        (s.seqs["start"], "0.1.0", "0123456789abcdef"),
        (s.seqs["restart-daemon"], "0.1.0", "0123456789abcdef"),
    ]
    assert [d["seq"] for d in later["daemon_starts"]] == [s.seqs["restart-daemon"]]


async def test_the_text_account(told: tuple[Path, Story]) -> None:
    path, _ = told
    text = render(await _timeline(path))
    assert "Job ns/low (c1): peak 8 GPU, 3 decision(s)" in text
    assert re.search(r"preempted by Job ns/high\s+Preempted: evicting ns/low", text)
    assert "not-admitted   Unschedulable: TopologyPlacementFailed" in text
    assert "daemon started  " in text
    assert text.count("kbatchd 0.1.0, decision rules 0123456789abcdef") == 2
    assert f"racks at seq {len(story().events):,}: 8 of 16 GPU in use" in text
    assert re.search(r"\n  c1/b1/r1 +4/8 +Job ns/low 4\n", text)


def test_a_workload_is_the_top_of_the_controller_chain() -> None:
    state = empty_state()
    state.jobsets["c/ns/set"] = JobSet(name="set", namespace="ns")
    state.jobs["c/ns/j"] = Job(name="j", namespace="ns", owners=(owner("JobSet", "set"),))
    state.pods["c/ns/p"] = Pod(name="p", namespace="ns", owners=(owner("Job", "j"),))
    state.pods["c/ns/g"] = Pod(name="g", namespace="ns", pod_group="gang")
    state.pods["c/ns/r"] = Pod(name="r", namespace="ns", owners=(owner("ReplicaSet", "rs"),))
    state.pods["c/ns/alone"] = Pod(name="alone", namespace="ns")
    assert workload_of(state, "Pod/c/ns/p") == "JobSet/c/ns/set"
    assert workload_of(state, "Pod/c/ns/g") == "PodGroup/c/ns/gang"
    assert workload_of(state, "Pod/c/ns/r") == "ReplicaSet/c/ns/rs"
    assert workload_of(state, "Pod/c/ns/alone") == "Pod/c/ns/alone"
    assert workload_of(state, "Job/c/ns/gone") == "Job/c/ns/gone"


# ---------------------------------------------------------------------------------------------
# The page


async def test_the_page_fetches_nothing_and_escapes_its_data(told: tuple[Path, Story]) -> None:
    path, _ = told
    data = await _timeline(path)
    data["marks"][0]["reason"] = "</script><script>alert(1)</script><!--"
    page = render_html(data)
    assert "http://" not in page
    assert "https://" not in page
    assert not re.search(r"<link|@import|url\(|\bsrc=|\bhref=", page)
    assert "default-src 'none'" in page  # the browser itself refuses any fetch
    assert page.count("</script>") == 2  # the data cannot close its element


async def test_the_page_draws_in_a_headless_browser(
    told: tuple[Path, Story], tmp_path: Path
) -> None:
    path, s = told
    data = await _timeline(path, at=s.seqs["low-0-deleting"])
    data["marks"][0]["reason"] += " </script> & <b>not markup</b>"
    page = tmp_path / "timeline.html"
    page.write_text(render_html(data), encoding="utf-8")
    dom = await anyio.to_thread.run_sync(dump_dom, page, tmp_path / "profile")
    elements = Elements(dom)
    body = elements.first("body")
    assert body.get("data-ready") == "true", body.get("data-error")
    assert len(elements.with_class("mark")) == len(data["marks"])
    assert [int(d["data-seq"]) for d in elements.with_class("start")] == [
        s.seqs["start"],
        s.seqs["restart-daemon"],
    ]
    hosts = elements.with_class("host")
    assert [h["data-node"] for h in hosts] == ["h1", "h2", "h3", "h4"]
    held = [a["data-workload"] for a in elements.with_class("slot") if "data-workload" in a]
    # At that seq low holds h1 and h2 (4 GPUs each), the decoy h4: one element per GPU.
    assert sorted(held) == sorted([LOW] * 8 + [OTHER] * 4)
    assert [d["data-domain"] for d in elements.with_class("domain")] == ["b1", "r1", "r2"]
    assert "12/16 GPU in use" in dom  # the label under the slider, computed by the script


async def test_the_page_opens_at_the_busiest_moment_unless_told_a_seq(
    told: tuple[Path, Story],
) -> None:
    """Without --at the page opens at the first seq at which the most GPUs were held; the
    changes up to it are in the data, so it can be drawn."""
    path, s = told
    data = await _timeline(path)
    held = {
        seq: sum(n for *_, pairs in _replayed(data, seq) for _, n in pairs)
        for seq in range(data["first_seq"] - 1, data["last_seq"] + 1)
    }
    most = max(held.values())
    assert data["open"] == min(seq for seq, n in held.items() if n == most)
    assert held[data["open"]] > held[data["last_seq"]], "the story is busier before its end"
    chosen = await _timeline(path, at=s.seqs["low-0-deleting"])
    assert chosen["open"] == chosen["at"] == s.seqs["low-0-deleting"]
