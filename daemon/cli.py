"""The `kbatchd` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import msgspec

from daemon.kube.errors import ConfigError as KubeconfigError
from daemon.runtime import eventloop
from daemon.runtime.heap import relax_collector
from daemon.service import config, provenance, wiring
from daemon.service.config import ConfigError, Settings
from daemon.service.logs import redact_text
from events.replay import (
    Replayed,
    describe,
    iso_time,
    open_for_replay,
    plain,
    rebuild,
    render_summary,
    summary,
)
from events.schema import STARTED_REF, Started
from events.state import CLUSTER_SCOPED, TABLES
from events.store import CorruptLog, EventLog, LogError, LogStorageError, check_whole

if TYPE_CHECKING:  # imported when --verify runs: the reconcilers are not loaded for the rest
    from daemon.tools.verify import Divergence, Run

EXIT_USAGE = 2
# The storage under the log failed (a full disk, an I/O error): one line, and an exit code
# that systemd restarts on, since a restart may well succeed. A running daemon rides such
# failures out itself; this is what a start meets, or a stop while the log takes nothing.
EXIT_STORAGE = 1


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


# Errors that are the user's to fix: one line on stderr, exit code 2, nothing started (or,
# for the cluster configuration, nothing acted on). systemd does not restart on them
# (RestartPreventExitStatus=2): a restart cannot fix a configuration, nor a log that another
# daemon writes. (A taken health port and impossible tracing settings are ConfigErrors too,
# and so is an unusable kubeconfig: `daemon.kube.errors.ConfigError`, named without loading
# the Kubernetes client, which commands that never reach a cluster do not import.) One
# LogError is not the user's: LogStorageError, which exits EXIT_STORAGE.
USER_ERRORS = (LogError, CliError, ConfigError, KubeconfigError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: the package version and the digest of the decision rules (what
    `kbatchd replay --verify` compares), worked out only when asked for (it hashes the
    sources)."""

    def __init__(self, option_strings: list[str], dest: str, **_: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        version, rules = provenance.kbatchd_version(), provenance.rules_digest()
        print(f"kbatchd {version} (decision rules {rules})")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kbatchd", description=__doc__)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    replay = commands.add_parser(
        "replay",
        help="rebuild state from a log; explain, verify, draw or share it",
        description="Rebuild state from an event log (read-only) and print it, or: one "
        "object's history (--show), an account of its life (--explain), a re-run of the "
        "reconcilers (--verify), an HTML timeline (--timeline --html FILE), or the log as "
        "JSON lines (--export-jsonl FILE; --import-jsonl FILE makes a new log LOG from one).",
    )
    _replay_arguments(replay)

    demo = commands.add_parser(
        "demo", help="the daemon on a simulated cluster, a scenario, and what happened"
    )
    demo.add_argument("--var", type=Path, default=Path("var"), help="where the log goes")

    run = commands.add_parser("run", help="run the daemon")
    run.add_argument("--config", type=Path, help="TOML settings (default: $KBATCHD_CONFIG)")
    run.add_argument("--kubeconfig", help="kubeconfig file (overrides the config's clusters)")
    run.add_argument("--context", help="context in the kubeconfig")
    run.add_argument("--log", help="the SQLite event log (overrides the config)")

    commands.add_parser("sim", help="run the simulated cluster", add_help=False)
    commands.add_parser("place", help="what-if topology placement", add_help=False)
    return parser


def _replay_arguments(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("log", type=Path, help="the SQLite event log")
    replay.add_argument("--until", type=_positive_int, metavar="SEQ", help="stop after SEQ")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument(
        "--show", metavar="KIND/NAMESPACE/NAME", help="one object's state and history"
    )
    mode.add_argument(
        "--explain",
        metavar="KIND/NAMESPACE/NAME",
        help="the object's life: what was observed, decided and done about it and what it "
        "controls, with the reasons",
    )
    mode.add_argument(
        "--verify",
        action="store_true",
        help="re-run the reconcilers at every recorded decision; exit 1 on a divergence",
    )
    mode.add_argument(
        "--check",
        action="store_true",
        help="walk the log's whole digest chain and check every snapshot against it; exit 1 "
        "where it breaks",
    )
    mode.add_argument(
        "--timeline",
        action="store_true",
        help="admissions, restarts and preemptions over time per workload, and GPU use per "
        "host (text; --html FILE for the page)",
    )
    mode.add_argument(
        "--export-jsonl", metavar="FILE", type=Path, help="write the log as JSON lines (- = stdout)"
    )
    mode.add_argument(
        "--import-jsonl",
        metavar="FILE",
        type=Path,
        help="create the new log LOG from JSON lines written by --export-jsonl",
    )
    replay.add_argument("--from", dest="from_seq", type=_positive_int, default=1, metavar="SEQ")
    replay.add_argument(
        "--config",
        type=Path,
        help="the daemon's settings (its reconcilers for --verify, its topology levels); "
        "default: those the log's daemon recorded when it created the log",
    )
    replay.add_argument(
        "--html", metavar="FILE", type=Path, help="--timeline: write a self-contained HTML page"
    )
    replay.add_argument(
        "--at",
        type=_positive_int,
        metavar="SEQ",
        help="--timeline: the seq the rack picture first shows (default: the end)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    wiring.wire()
    if args_list[:1] == ["sim"]:
        from daemon.sim.cli import main as sim_main

        return sim_main(args_list[1:])
    if args_list[:1] == ["place"]:
        from daemon.tools.place import main as place_main

        return place_main(args_list[1:])
    args = build_parser().parse_args(args_list)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "replay":
            return eventloop.run(_replay, args)
        if args.command == "demo":
            from daemon.tools.demo import fresh_log_path, run_demo

            try:
                path = fresh_log_path(args.var)
            except FileExistsError:
                raise CliError(f"--var {args.var}: not a directory") from None
            except OSError as exc:
                raise CliError(f"--var {args.var}: cannot use it: {exc.strerror or exc}") from None
            return eventloop.run(run_demo, path)
    except USER_ERRORS as exc:
        # Messages may quote a kubeconfig (the client's errors do): never print its secrets.
        print(f"kbatchd: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_STORAGE if isinstance(exc, LogStorageError) else EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


def _run(args: argparse.Namespace) -> int:
    from daemon.service import logs
    from daemon.service.run import serve

    settings = config.load(args.config)
    if args.log:
        settings.log = args.log
    if args.kubeconfig or args.context:
        name = args.context or "default"
        settings.clusters = [
            config.Cluster(name=name, kubeconfig=args.kubeconfig or "", context=args.context or "")
        ]
    logging = settings.logging
    try:
        logs.configure(logging.level, fmt=logging.format, file=logging.file)
    except OSError as exc:
        raise ConfigError(f"logging.file: cannot open {logging.file}: {exc.strerror}") from exc
    relax_collector()
    try:
        return eventloop.run(serve, settings)
    except BaseExceptionGroup as group:
        # The service runs in task groups, which wrap what they raise: a user error alone
        # in one is still a user error.
        raise _sole(group) from None


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, USER_ERRORS) else group


async def _replay(args: argparse.Namespace) -> int:
    try:
        return await _replay_mode(args)
    except BrokenPipeError:
        # Piped into `head` or a pager that quit: not an error. Point stdout at /dev/null so
        # that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


async def _replay_mode(args: argparse.Namespace) -> int:
    if (args.html is not None or args.at is not None) and not args.timeline:
        raise CliError("--html and --at go with --timeline")
    if args.until is not None and args.from_seq > args.until:
        raise CliError(f"--from {args.from_seq} is after --until {args.until}: nothing between")
    for flag, ref in (("--show", args.show), ("--explain", args.explain)):
        if ref is not None:  # before the replay; an empty one is an error too
            parse_ref(ref, flag)
    if args.import_jsonl is not None:
        return await _import_jsonl(args)
    if args.verify:
        return await _verify(args)
    if args.check:
        return await _check(args)
    async with open_for_replay(args.log, note=_note) as log:
        past_end = await _until_past_end(log, args)
        code = await _replay_open(log, args)
    if past_end is not None:
        _note(past_end)
    return code


async def _replay_open(log: EventLog, args: argparse.Namespace) -> int:
    if args.explain is not None:
        return await _explain(log, args)
    if args.timeline:
        return await _timeline(log, args)
    if args.export_jsonl is not None:
        return await _export_jsonl(log, args)
    settings, _ = await _log_settings(log, args)
    replayed = await rebuild(
        log,
        until=args.until,
        levels=tuple(settings.topology.levels),
        progress=_tty_progress(),
    )
    for skipped in replayed.skipped:
        _note(skipped.describe(str(args.log)))
    if args.show is not None:
        data = await show(log, replayed, args.show)
        print(_json(data) if args.json else render_show(data))
    else:
        starts = await log.events_for(STARTED_REF, until=replayed.last_seq)
        data = summary(replayed, str(args.log), starts)
        print(_json(data) if args.json else render_summary(data))
    return 0


async def _explain(log: EventLog, args: argparse.Namespace) -> int:
    from daemon.tools import explain

    kind, namespace, name = parse_ref(args.explain, "--explain")
    try:
        data = await explain.explain(
            log, kind, namespace, name, until=args.until, progress=_tty_progress()
        )
    except explain.ExplainError as exc:
        raise CliError(str(exc)) from None
    print(_json(data) if args.json else explain.render(data))
    return 0


async def _timeline(log: EventLog, args: argparse.Namespace) -> int:
    from daemon.tools import timeline, timeline_page

    settings, _ = await _log_settings(log, args)
    data = await timeline.timeline(
        log,
        from_seq=args.from_seq,
        until=args.until,
        at=args.at,
        levels=tuple(settings.topology.levels),
        progress=_tty_progress(),
    )
    if args.html is not None:
        page = timeline_page.render_html(data)
        try:
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--html {args.html}: cannot write: {exc.strerror or exc}") from None
        print(
            f"wrote {args.html}: {len(data['workloads'])} workload(s), {len(data['marks']):,} "
            f"decision(s), {len(data['hosts']):,} host(s), seq {data['first_seq']:,}.."
            f"{data['last_seq']:,} (racks at seq {data['at']:,}); open it in a browser"
        )
    elif args.json:
        print(_json(data))
    else:
        print(timeline.render(data))
    return 0


async def _export_jsonl(log: EventLog, args: argparse.Namespace) -> int:
    from daemon.tools import jsonl

    try:
        count = await jsonl.export(
            log, args.export_jsonl, until=args.until, progress=_tty_progress()
        )
    except jsonl.JsonlError as exc:
        raise CliError(f"--export-jsonl {exc}") from None
    print(f"exported {count:,} event(s) of {args.log}", file=sys.stderr)
    return 0


async def _import_jsonl(args: argparse.Namespace) -> int:
    from daemon.tools import jsonl

    try:
        count = await jsonl.import_file(args.import_jsonl, args.log, progress=_tty_progress())
    except jsonl.JsonlError as exc:
        raise CliError(f"--import-jsonl {exc}") from None
    print(f"imported {count:,} event(s) into the new log {args.log}", file=sys.stderr)
    return 0


def _note(text: str) -> None:
    print(f"kbatchd: note: {text}", file=sys.stderr)


async def _until_past_end(log: EventLog, args: argparse.Namespace) -> str | None:
    """A `--until` beyond the newest event is most likely a seq from another log (or a
    typo): the note that says so instead of quietly replaying to the end. Printed once the
    log has been read: the count of a damaged one can be anything, and what refuses it is
    then the one line printed."""
    if args.until is None:
        return None
    last = await log.count()
    if args.until > last:
        return f"{args.log}: --until {args.until} is past the log's end (seq {last}); to the end"
    return None


async def _log_settings(log: EventLog, args: argparse.Namespace) -> tuple[Settings, bool]:
    """The settings to replay the log with, and whether they were given: the config file's
    when there is one, else those its daemon recorded when it created the log (a `Started`
    event first), else the defaults."""
    path = config.given_path(args.config)
    if path is not None:
        return config.load(path), True
    async for _, event in log.read(1, 1):
        if isinstance(event, Started):
            try:
                return provenance.recorded_settings(event), False
            except provenance.RecordedSettingsError as exc:
                _note(f"{args.log}: {exc}; replaying with the defaults")
    return Settings(), False


async def _verify(args: argparse.Namespace) -> int:
    from daemon.service import wiring
    from daemon.tools.verify import verify

    async with open_for_replay(args.log, note=_note) as log:
        past_end = await _until_past_end(log, args)
        settings, given = await _log_settings(log, args)
        result = await verify(
            log,
            wiring.reconcilers(settings),
            from_seq=args.from_seq,
            until=args.until,
            levels=tuple(settings.topology.levels),
            progress=_tty_progress(),
            settings=settings if given else None,
            build=None if given else wiring.reconcilers,
        )
    if past_end is not None:
        _note(past_end)
    for skipped in result.skipped:
        _note(skipped.describe(str(args.log)))
    for run in result.runs:
        if run.settings_match is False:
            _note(
                f"{args.log}: the daemon that started at seq {run.seq:,} ran with other "
                "reconciler or topology settings than the config given; without --config "
                "the log's own are used"
            )
        elif run.decided_with == "unreadable":
            _note(
                f"{args.log}: the settings recorded at seq {run.seq:,} (kbatchd "
                f"{run.version}) cannot be read by this kbatchd; the previous ones are used"
            )
    if args.json:
        print(_json(result))
    elif result.divergence is None:
        print(
            f"{args.log}: {result.checked:,} decision(s) in seq {result.first_seq:,}.."
            f"{result.last_seq:,} reproduced exactly"
        )
    else:
        made_by = result.run_at(result.divergence.seq)
        print(render_divergence(str(args.log), result.divergence, made_by))
    return 0 if result.divergence is None else 1


async def _check(args: argparse.Namespace) -> int:
    async with open_for_replay(args.log, note=_note) as log:
        try:
            checked = await anyio.to_thread.run_sync(check_whole, log.path)
        except CorruptLog as exc:
            # Where it breaks is the answer, not a failure to give one: exit 1, as --verify's
            # divergence. (A file that is no log at all is a LogError: exit 2.)
            broken = str(exc).replace(log.path, str(args.log))
            print(_json({"log": str(args.log), "broken": broken}) if args.json else broken)
            return 1
    if args.json:
        print(_json(msgspec.structs.replace(checked, log=str(args.log))))
    else:
        print(
            f"{args.log}: digest chain whole over seq 1..{checked.last_seq:,}, "
            f"{checked.snapshots} snapshot(s) agreeing with it (head {checked.head})"
        )
    return 0


def _made_by(run: Run | None) -> str:
    """What the daemon that made a decision says about a divergence."""
    if run is None:
        return (
            "  (--json prints both decisions whole; the log does not say which kbatchd made "
            "this decision: one written by another version diverges wherever its reconcilers "
            "have changed since)"
        )
    if run.same_rules:
        return (
            f"  (--json prints both decisions whole; made by kbatchd {run.version} with these "
            f"very decision rules ({run.rules}, daemon started at seq {run.seq:,}): a "
            "decision that does not reproduce is a bug)"
        )
    return (
        f"  (--json prints both decisions whole; made by kbatchd {run.version} with decision "
        f"rules {run.rules} (daemon started at seq {run.seq:,}), and these are "
        f"{provenance.rules_digest()}: where the rules changed, its decisions differ; verify "
        "a log with the kbatchd that wrote it)"
    )


def render_divergence(path: str, found: Divergence, run: Run | None = None) -> str:
    def short(value: Any) -> str:
        text = msgspec.json.encode(value).decode()
        return text if len(text) <= 200 else text[:197] + "..."

    lines = [
        f"{path}: decision at seq {found.seq:,} is not reproduced",
        f"  reconciler {found.reconciler}, key {found.key}",
        f"  recorded reason:   {found.recorded['reason']}",
        "  recomputed reason: "
        + (found.recomputed["reason"] if found.recomputed else "(no decision)"),
        f"  first difference at {found.path}:",
        f"    recorded:   {short(found.recorded_value)}",
        f"    recomputed: {short(found.recomputed_value)}",
        _made_by(run),
        "  the events that fed it:",
        *(f"    {e['seq']:>10,}  {e['at']}  {e['summary']}" for e in found.fed_by),
    ]
    return "\n".join(lines)


def _json(data: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(data)).decode()


def _tty_progress() -> Any:
    if not sys.stderr.isatty():
        return None

    def progress(seq: int, last: int) -> None:
        end = "\n" if seq >= last else ""
        percent = 100 * seq // max(last, 1)
        print(f"\rreplaying {seq:,}/{last:,} ({percent}%)", end=end, file=sys.stderr, flush=True)

    return progress


def parse_ref(text: str, flag: str = "--show") -> tuple[str, str, str]:
    """``KIND/NAMESPACE/NAME`` (or ``KIND/NAME`` for cluster-scoped kinds) → its parts, with
    the kind in its canonical spelling."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not parts[-1]:
        raise CliError(f"{flag}: expected KIND/NAMESPACE/NAME, got {text!r}")
    spelled = {k.lower(): k for k in TABLES} | {v.lower(): k for k, v in TABLES.items()}
    kind = spelled.get(parts[0].lower())
    if kind is None:
        raise CliError(f"{flag}: unknown kind {parts[0]!r} (one of {', '.join(TABLES)})")
    scoped = kind in CLUSTER_SCOPED
    if len(parts) == 2 and not scoped:
        raise CliError(
            f"{flag}: {kind} is namespaced: expected {kind}/NAMESPACE/NAME, got {text!r}"
        )
    if len(parts) == 3 and scoped:
        raise CliError(f"{flag}: {kind} is cluster-scoped: expected {kind}/NAME, got {text!r}")
    return kind, parts[1] if len(parts) == 3 else "", parts[-1]


async def show(log: EventLog, replayed: Replayed, text: str) -> dict[str, Any]:
    kind, namespace, name = parse_ref(text)
    state = replayed.state
    suffix = f"/{namespace}/{name}"
    clusters = sorted({key.split("/", 1)[0] for key in state.table(kind)} | _clusters(state))
    found = []
    for cluster in clusters:
        ref = f"{kind}/{cluster}{suffix}"
        history = await log.events_for(ref, until=replayed.last_seq)
        obj = state.table(kind).get(f"{cluster}{suffix}")
        if obj is None and not history:
            continue
        found.append(
            {
                "ref": ref,
                "object": plain(obj) if obj is not None else None,
                "events": [
                    {"seq": seq, "at": iso_time(event.at), "summary": describe(event)}
                    for seq, event in history
                ],
            }
        )
    if not found:
        raise CliError(f"{log.path}: no {kind} {text.split('/', 1)[1]} up to seq {state.seq}")
    return {"seq": state.seq, "objects": found}


def _clusters(state: Any) -> set[str]:
    return {mark.split("/", 1)[0] for mark in state.synced}


def render_show(data: dict[str, Any]) -> str:
    lines: list[str] = []
    for item in data["objects"]:
        status = "gone" if item["object"] is None else "present"
        lines.append(f"{item['ref']} at seq {data['seq']:,}: {status}")
        if item["object"] is not None:
            lines.extend("  " + line for line in _json(item["object"]).splitlines())
        lines.append("history:")
        lines.extend(f"  {e['seq']:>10,}  {e['at']}  {e['summary']}" for e in item["events"])
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
