"""Real `kbatchd` processes for integration tests: started on loopback, their output lines
collected, and waited on by condition with a bound (never by sleeping)."""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
from anyio.abc import ByteReceiveStream, Process
from kubernetes_asyncio import client, config

from daemon.sim import cli as sim_cli
from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults
from events.schema import Event
from events.store import EventLog

Predicate = Callable[[str], bool]


# Where the test run's Python processes keep compiled modules when the environment says not
# to write them beside the sources (PYTHONDONTWRITEBYTECODE, set to keep __pycache__ out of a
# checkout): without a cache every `python -m daemon.cli` a test starts compiles kbatchd
# again, about a second of CPU each, and pytest rewrites and compiles every test module at
# every collection. Outside the tree, one per user, only ever read by the user who wrote it.
BYTECODE_CACHE = Path(tempfile.gettempdir()) / f"kbatchd-tests-pycache-{os.getuid()}"


def _bytecode_cache() -> str | None:
    """The cache directory, made if needed; None if it is not this user's alone."""
    try:
        BYTECODE_CACHE.mkdir(mode=0o700, exist_ok=True)
        info = BYTECODE_CACHE.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return str(BYTECODE_CACHE)


def cache_bytecode() -> None:
    """This process caches compiled modules in `BYTECODE_CACHE` where the environment forbids
    writing them beside the sources (and names no cache of its own)."""
    if sys.dont_write_bytecode and sys.pycache_prefix is None:
        cache = _bytecode_cache()
        if cache is not None:
            sys.dont_write_bytecode = False
            sys.pycache_prefix = cache


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a Python child of a test (`os.environ` and `extra`), caching its
    compiled modules as `cache_bytecode` does for this process."""
    environment = {**os.environ, **(extra or {})}
    if environment.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in environment:
        cache = _bytecode_cache()
        if cache is not None:
            del environment["PYTHONDONTWRITEBYTECODE"]
            environment["PYTHONPYCACHEPREFIX"] = cache
    return environment


class Child:
    """A child process whose stdout and stderr lines are kept in order."""

    def __init__(self, name: str, process: Process) -> None:
        self.name = name
        self.process = process
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._changed = anyio.Event()

    async def _collect(self, stream: ByteReceiveStream | None, into: list[str]) -> None:
        if stream is None:
            return
        pending = b""
        async for chunk in stream:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                into.append(line.decode("utf-8", "replace"))
            self._changed.set()
            self._changed = anyio.Event()
        if pending:
            into.append(pending.decode("utf-8", "replace"))
        self._changed.set()

    async def wait_for(self, predicate: Predicate, *, within: float = 30.0) -> str:
        """The first stdout line matching `predicate`, waiting for it up to `within` s."""
        with anyio.fail_after(within):
            seen = 0
            while True:
                for line in self.stdout[seen:]:
                    if predicate(line):
                        return line
                seen = len(self.stdout)
                if self.process.returncode is not None:
                    raise AssertionError(f"{self.name} exited: {self.output()}")
                await self._changed.wait()

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far."""
        parsed = []
        for line in self.stdout:
            if line.startswith("{"):
                parsed.append(json.loads(line))
        return parsed

    def lines(self, event: str) -> list[dict[str, Any]]:
        """The JSON log lines of one event (``"event": EVENT``) written so far."""
        return [line for line in self.logs() if line.get("event") == event]

    def output(self) -> str:
        return "\n".join([*self.stdout[-40:], "--- stderr ---", *self.stderr[-40:]])

    def send_signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    async def wait(self, *, within: float = 15.0) -> int:
        with anyio.fail_after(within):
            return await self.process.wait()


# `python -m daemon.cli ARGV` with the size of any file it writes limited to the first argument:
# a write past it fails with EFBIG (Python ignores SIGXFSZ), as a write to a full disk fails.
_WITH_FILE_SIZE_LIMIT = (
    "import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
    "runpy.run_module('daemon.cli', run_name='__main__', alter_sys=True)"
)


# `python -m daemon.cli ARGV` that SIGKILLs itself once the first N binds (the first argument)
# have landed, at the next intent that would go past them: the next bind or the PodGroup
# status after the binds. Binds past the N-th are held back unsent, however many the actuator
# runs at once, so exactly N reach the cluster.
_KILLED_AFTER = """
import asyncio, os, runpy, signal, sys
from daemon.kube import actuator
from events.intents import Bind, Delete, Patch
limit, counted = int(sys.argv.pop(1)), sys.argv.pop(1)
perform = actuator.Actuator.perform
sent = landed = 0
past = None
def counts(intent):
    if counted.startswith('write:'):
        return type(intent) is not Delete and counted[6:] in repr(intent)
    if counted == 'binds':
        return type(intent) is Bind
    if counted == 'deletes':
        return type(intent) is Delete and intent.kind == 'Pod'
    return (type(intent) is Patch and intent.kind == 'Pod' and intent.subresource == 'status'
            and 'DisruptionTarget' in repr(intent.patch))
def closes(intent):
    # What announces the counted intents: a bind's group status (a mark's has none).
    return counted == 'binds' and type(intent) is Patch and intent.kind == 'PodGroup' and (
        intent.subresource)
async def dying(self, intent, *rest):
    global sent, landed, past
    if past is None:
        past = asyncio.Event()
        if not limit:
            past.set()
    if counts(intent):
        sent += 1
    if (counts(intent) and sent > limit) or (closes(intent) and sent):
        await past.wait()
        os.kill(os.getpid(), signal.SIGKILL)
    result = await perform(self, intent, *rest)
    if counts(intent):
        landed += 1
        if landed == limit:
            past.set()
    return result
actuator.Actuator.perform = dying
runpy.run_module('daemon.cli', run_name='__main__', alter_sys=True)
"""


@functools.cache
def private_mounts() -> str:
    """Why a process cannot get a mount namespace of its own here (`unshare -rm`: a user
    namespace mapping this user to root, which may mount tmpfs and bind mounts), "" if it can."""
    try:
        done = subprocess.run(
            ["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
            capture_output=True,
            timeout=30,
        )
    except OSError as exc:
        return f"no unshare: {exc}"
    if done.returncode == 0:
        return ""
    return done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"


@asynccontextmanager
async def spawn(
    name: str,
    *argv: str,
    env: dict[str, str] | None = None,
    file_size_limit: int | None = None,
    killed_after_binds: int | None = None,
    killed_after_marks: int | None = None,
    killed_after_deletes: int | None = None,
    killed_before_write: str | None = None,
    mount: Sequence[str] = (),
) -> AsyncIterator[Child]:
    """Start ``kbatchd ARGV`` and kill it on exit if it is still running. `file_size_limit`:
    bytes past which it cannot grow a file (a full disk, for fault tests); `killed_after_binds`
    (`killed_after_marks`, `killed_after_deletes`): it SIGKILLs itself once that many binds
    (preemption victims marked DisruptionTarget, pods deleted) have landed, before the next
    is sent (`_KILLED_AFTER`); `killed_before_write`: it SIGKILLs itself as it is about to
    send the first write (not a delete) whose intent holds that text, its decision logged.
    `mount`: the
    arguments of a ``mount`` made first in a mount namespace of the process's own (see
    `private_mounts`), which only it sees; others reach it under ``/proc/PID/root``."""
    environment = child_environment({"PYTHONUNBUFFERED": "1", **(env or {})})
    command = [sys.executable, "-m", "daemon.cli"]
    if file_size_limit is not None:
        command = [sys.executable, "-c", _WITH_FILE_SIZE_LIMIT, str(file_size_limit)]
    elif killed_after_binds is not None:
        command = [sys.executable, "-c", _KILLED_AFTER, str(killed_after_binds), "binds"]
    elif killed_after_marks is not None:
        command = [sys.executable, "-c", _KILLED_AFTER, str(killed_after_marks), "marks"]
    elif killed_after_deletes is not None:
        command = [sys.executable, "-c", _KILLED_AFTER, str(killed_after_deletes), "deletes"]
    elif killed_before_write is not None:
        command = [sys.executable, "-c", _KILLED_AFTER, "0", f"write:{killed_before_write}"]
    if mount:
        # exec all the way: the pid is the daemon's.
        script = f'mount {shlex.join(mount)} && exec "$@"'
        command = ["unshare", "-rm", "sh", "-c", script, "sh", *command]
    process = await anyio.open_process(
        [*command, *argv],
        stdin=subprocess.DEVNULL,
        env=environment,
    )
    child = Child(name, process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(child._collect, process.stdout, child.stdout)
        tg.start_soon(child._collect, process.stderr, child.stderr)
        try:
            yield child
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
            with anyio.move_on_after(10):
                await process.wait()
            await process.aclose()


@asynccontextmanager
async def simulated_cluster(
    tmp: Path, *args: str, topology: str = "blocks=1,racks=2,hosts=4,gpus=8"
) -> AsyncIterator[tuple[Child, Path]]:
    """`kbatchd sim` on loopback; yields it and its kubeconfig once it serves."""
    kubeconfig = tmp / "kubeconfig"
    async with spawn(
        "sim", "sim", "--kubeconfig", str(kubeconfig), "--topology", topology, *args
    ) as sim:
        await sim.wait_for(lambda line: line.startswith("ready "))
        yield sim, kubeconfig


@asynccontextmanager
async def simulated_cluster_here(
    tmp: Path, *args: str, topology: str = "blocks=1,racks=2,hosts=4,gpus=8"
) -> AsyncIterator[tuple[SimCluster, Path]]:
    """What `simulated_cluster` serves, from this process: the same `kbatchd sim` arguments
    (read by its own parser), a `SimCluster` on loopback in the test's event loop, serving
    until the block ends. For tests of the daemon as a process, which need no second
    interpreter for the cluster; yields it and its kubeconfig."""
    kubeconfig = tmp / "kubeconfig"
    argv = ["--kubeconfig", str(kubeconfig), "--topology", topology, *args]
    parsed = sim_cli.parser().parse_args(argv)
    assert parsed.clusters == 1, "one cluster here; `simulated_cluster` serves several"
    async with SimCluster.start(
        topology=parsed.topology or None,
        seed=parsed.seed,
        time_scale=parsed.time_scale,
        faults=Faults.parse(parsed.faults, seed=parsed.seed),
        bookmark_seconds=parsed.bookmark_seconds,
        history=parsed.history,
        host=parsed.host,
        port=parsed.port,
        token=parsed.token,
        name="sim-0",
        kubeconfig_path=kubeconfig,
        not_ready_fail_seconds=parsed.not_ready_fail_seconds,
    ) as sim:
        yield sim, kubeconfig


# `[daemon]` keys of every test daemon (see `daemon_config`).
_TEST_DAEMON: Final = {
    "tick_seconds": 0.2,
    "watch_inactivity_seconds": 10,
    "retry_backoff_seconds": [0.2, 5.0],
    "api_retry_seconds": [0.1, 2.0],
    "act_retry_seconds": [0.05, 1.0],
}


def daemon_config(
    tmp: Path,
    kubeconfig: Path,
    *,
    name: str = "kbatchd",
    cluster: str = "sim-0",
    extra: str = "",
    job: dict[str, Any] | None = None,
    **daemon: Any,
) -> Path:
    """A TOML config for `kbatchd run` against one simulated cluster, written to `tmp/NAME.toml`
    with the log at `tmp/NAME.db`. Failure back-off starts at 1 s instead of 10 s, a key
    whose decision failed (a 409, a write given up) is decided again after 0.2 s doubling to
    5 s instead of 1 s doubling to 60 s, a cluster is asked again after 0.1 s (not 1 s) and an
    API call tried again after 0.05 s (not 0.1 s), so that tests of what happens after a
    failure stay short; the health endpoint takes a free
    loopback port (several daemons may run at once); `job` are more keys of
    ``[reconcilers.job]`` and `daemon` of ``[daemon]`` (replacing those); `extra` is TOML
    appended at the end."""
    lines = [
        f'log = "{tmp / f"{name}.db"}"',
        "[[clusters]]",
        f'name = "{cluster}"',
        f'kubeconfig = "{kubeconfig}"',
        "[reconcilers.job]",
        *(
            f"{key} = {json.dumps(value)}"
            for key, value in {"backoff_base_seconds": 1.0, **(job or {})}.items()
        ),
        "[health]",
        'address = "127.0.0.1:0"',
        "[daemon]",
        *(f"{key} = {json.dumps(value)}" for key, value in {**_TEST_DAEMON, **daemon}.items()),
        extra,
    ]
    path = tmp / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def running_daemon(config: Path) -> AsyncIterator[Child]:
    """`kbatchd run` until its watches have listed (the `synced` log line)."""
    async with spawn("daemon", "run", "--config", str(config)) as daemon:
        await daemon.wait_for(lambda line: '"synced"' in line)
        yield daemon


async def eventually(
    check: Callable[[], Awaitable[Any]], *, within: float = 30.0, what: str = "condition"
) -> Any:
    """Re-check `check` until it returns something truthy, for at most `within` seconds.

    For state that has no event to wait on (another process's log file, say): polls with a
    short back-off; fails with `what` when the bound passes."""
    delay = 0.01
    last: Any = None
    try:
        with anyio.fail_after(within):
            while True:
                last = await check()
                if last:
                    return last
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
    except TimeoutError:
        raise AssertionError(f"{what} not reached within {within} s (last: {last!r})") from None


async def logged_events(path: Path) -> list[tuple[int, Event]]:
    """Every event in a log another process may be writing (read-only, never blocks it)."""
    async with EventLog.open(path, readonly=True) as log:
        return [pair async for pair in log.read()]


def metric_samples(text: str) -> dict[str, float]:
    """Prometheus text: `name{labels}` -> value, for every sample line."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def scraped(daemon: Child) -> dict[str, float]:
    """A running daemon's metrics (`metric_samples` of its /metrics)."""
    url = daemon.lines("health serving")[0]["url"]
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        response.raise_for_status()
        return metric_samples(await response.text())


@asynccontextmanager
async def kube_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


async def assert_reproduced(path: Path) -> int:
    """`kbatchd replay --verify` on a log an integration test produced: every recorded decision
    must come out of the reconcilers again, built from nothing but what the log recorded of
    its daemons (their `Started` events). Returns how many were checked."""
    from daemon.service import wiring
    from daemon.service.config import Settings
    from daemon.tools.verify import verify

    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, wiring.reconcilers(Settings()), build=wiring.reconcilers)
    assert result.divergence is None, result.divergence
    assert result.runs, "no daemon start recorded in the log"
    assert all(run.same_rules and run.decided_with == "recorded" for run in result.runs)
    return result.checked


def stderr_on_a_terminal(*argv: str) -> bytes:
    """What ``kbatchd ARGV`` writes to stderr when stderr is a terminal (a pty)."""
    import pty

    leader, follower = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-m", "daemon.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env=child_environment(),
            timeout=120,
            check=True,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break  # the pty is closed once the child and our end are gone
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    return seen


def snapshot_seqs(log: Path) -> list[int]:
    """The seqs of the snapshots a log holds, oldest first (read with plain sqlite3)."""
    with closing(sqlite3.connect(log)) as conn:
        return [seq for (seq,) in conn.execute("SELECT seq FROM snapshots ORDER BY seq")]
