"""Properties of `kbatchd` on whatever it is given, in-process: random argument vectors for
`replay`, `run` and `place`, and real logs damaged at random (bytes flipped, cut short, rows
deleted or changed past the triggers).

The promise: success, or the documented exit code (2 for what the user must fix; 1 where
`--check` finds the chain broken or `--verify` a divergence) with one line on stderr and no
traceback; and a log that is read is never written, whatever it holds. (`sim` and `demo` run
until stopped, and are left out.)
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daemon.cli import main
from tests.daemon.test_cli import _digest, _write_log
from tests.events.test_store_properties import apply_damage, damage

EVENTS = 300
# Each example makes its own files (`workspace`): the function-scoped fixtures are only read.
FIXTURE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real log of a few hundred events (no snapshot: `_write_log` takes one at seq 4,000)."""
    path = tmp_path_factory.mktemp("log") / "kbatchd.db"
    anyio.run(_write_log, path, EVENTS)
    return path


@contextmanager
def workspace(log: Path) -> Iterator[dict[str, Path]]:
    """A fresh directory per example (an import or an export leaves files that must not
    change the next example), with every kind of path an argument may name."""
    with tempfile.TemporaryDirectory(prefix="kbatchd-cli-") as where:
        root = Path(where)
        paths = {
            "log": root / "kbatchd.db",
            "missing": root / "missing.db",
            "directory": root / "dir",
            "text": root / "notes.txt",
            "bad-config": root / "bad.toml",
            "good-config": root / "good.toml",
            "jsonl": root / "events.jsonl",
            "under-a-file": root / "notes.txt" / "x",
        }
        shutil.copyfile(log, paths["log"])
        paths["directory"].mkdir()
        paths["text"].write_text("not a log\n" * 50)
        paths["bad-config"].write_text("[daemon]\ntick_seconds = -1\n")
        paths["good-config"].write_text('[topology]\nlevels = ["kubernetes.io/hostname"]\n')
        paths["jsonl"].write_text('{"seq": 1}\nnot json\n')
        yield paths


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`kbatchd ARGV` in this process: its exit code (argparse's SystemExit included), stdout
    and stderr. Any other exception fails the test: it would be a traceback."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def assert_success_or_one_line(code: int, err: str, allowed: tuple[int, ...] = (0, 2)) -> None:
    assert code in allowed, (code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("kbatchd"), err


PATHS = st.sampled_from(
    ["log", "missing", "directory", "text", "bad-config", "good-config", "jsonl", "under-a-file"]
)
NUMBERS = st.one_of(
    st.integers(-5, EVENTS + 50).map(str),
    st.sampled_from(["0", "1", "-1", "zero", "", "1e3", "99999999999999999999999", "٣"]),
)
REFS = st.one_of(
    st.sampled_from(
        ["Node/c1//n0", "Node/n0", "Pod/ns/p0", "Job/ns/j", "pod/ns/x", "Gadget/x/y", "", "/",
         "Node//", "Pod/ns/", "PriorityClass/high"]
    ),
    st.text(max_size=10),
)  # fmt: skip
# Each option of `kbatchd replay` with a value drawn for it (a path by its kind).
REPLAY_OPTIONS = st.one_of(
    st.tuples(st.sampled_from(["--until", "--from", "--at"]), NUMBERS),
    st.tuples(st.sampled_from(["--show", "--explain"]), REFS),
    st.tuples(st.sampled_from(["--export-jsonl", "--import-jsonl", "--html", "--config"]), PATHS),
    st.tuples(st.sampled_from(["--json", "--verify", "--check", "--timeline", "--bogus", "-"])),
)


def _argv(parts: list[tuple[str, ...]], paths: dict[str, Path]) -> list[str]:
    return [str(paths[part]) if part in paths else part for option in parts for part in option]


@settings(FIXTURE, max_examples=60)
@given(PATHS, st.lists(REPLAY_OPTIONS, max_size=3))
@example("log", [("--export-jsonl", "log")])  # the log itself as the export's file
@example("missing", [("--import-jsonl", "jsonl")])  # a file that is no export
@example("log", [("--timeline",), ("--html", "under-a-file")])
def test_replay_arguments_succeed_or_are_one_line_and_never_change_the_log(
    small_log: Path, capsys: pytest.CaptureFixture[str], log: str, options: list[tuple[str, ...]]
) -> None:
    with workspace(small_log) as paths:
        before = _digest(paths["log"])
        code, _, err = run_main(["replay", str(paths[log]), *_argv(options, paths)], capsys)
        # 1: --check found the chain broken, --verify a decision not reproduced.
        assert_success_or_one_line(code, err, allowed=(0, 1, 2))
        assert _digest(paths["log"]) == before


RUN_OPTIONS = st.one_of(
    st.tuples(st.sampled_from(["--log", "--kubeconfig", "--config"]), PATHS),
    st.tuples(st.sampled_from(["--context", "--log"]), st.text(max_size=8)),
    st.tuples(st.sampled_from(["--bogus", "-v", "--"])),
)


@settings(FIXTURE, max_examples=40)
@given(
    st.sampled_from(["missing", "directory", "text", "bad-config", "jsonl"]),
    st.lists(RUN_OPTIONS, max_size=3),
)
def test_run_with_settings_it_refuses_is_one_line_and_exit_2_before_anything_starts(
    small_log: Path,
    capsys: pytest.CaptureFixture[str],
    refused: str,
    options: list[tuple[str, ...]],
) -> None:
    # The settings file is always one `config.load` refuses, given last so that it wins: what
    # `run` accepts would start the daemon.
    with workspace(small_log) as paths:
        before = _digest(paths["log"])
        argv = ["run", *_argv(options, paths), "--config", str(paths[refused])]
        code, out, err = run_main(argv, capsys)
        assert code == 2
        assert_success_or_one_line(code, err)
        assert out == ""
        assert _digest(paths["log"]) == before


@settings(FIXTURE, max_examples=30)
@given(st.lists(st.one_of(PATHS, st.sampled_from(["-h", "--help", "-", "--bogus"])), max_size=3))
def test_place_arguments_succeed_or_are_one_line(
    small_log: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    with workspace(small_log) as paths, pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO("not a request"))  # for `-`
        code, _, err = run_main(["place", *(str(paths.get(a, a)) for a in args)], capsys)
        assert_success_or_one_line(code, err)
        if code == 2:
            assert err.startswith("kbatchd place: ")


# ---------------------------------------------------------------------------------------------
# Damaged logs


@settings(FIXTURE, max_examples=60)
@given(damage(), st.sampled_from([[], ["--json"], ["--check"], ["--until", "20"]]))
@example(("flip", [(0, 1)]), [])  # the SQLite header
# The end of the first page, a trigger's SQL: "END" became "EN\xe1", and SQLite's error
# message quoting it did not decode (UnicodeDecodeError, a traceback).
@example(("flip", [(65_535, 0xA5)]), [])
@example(("truncate", 100), [])
# Cut short, the log counted 0 events: a note "--until 20 is past the log's end (seq 0)" came
# before the line refusing it.
@example(("truncate", 393_221), ["--until", "20"])
@example(("vandalize", ("UPDATE events SET body = NULL WHERE seq = ?", 5)), [])
@example(("vandalize", ("UPDATE schema_migrations SET version = ?", 999)), [])
def test_a_damaged_log_is_read_or_refused_in_one_line_and_never_written(
    small_log: Path, capsys: pytest.CaptureFixture[str], hurt: tuple[str, object], flags: list[str]
) -> None:
    with workspace(small_log) as paths:
        path = paths["log"]
        apply_damage(path, *hurt)
        before = _digest(path)
        code, _, err = run_main(["replay", str(path), *flags], capsys)
        # --check says where the chain breaks, on stdout, with exit 1.
        assert_success_or_one_line(code, err, allowed=(0, 1, 2) if "--check" in flags else (0, 2))
        if code == 2:
            assert str(path) in err
        assert _digest(path) == before
