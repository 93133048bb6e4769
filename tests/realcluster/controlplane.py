"""A real Kubernetes control plane on loopback: etcd, kube-apiserver (TLS, client-certificate
and ServiceAccount-token authentication, RBAC, admission), kube-controller-manager,
kube-scheduler and kwok, built by `build.sh` from pinned Go modules.

kwok plays the kubelets: the nodes are the simulated cluster's GPU topology (the same spec
string), and the pods live by the same `sim.kbatchd.dev/*` annotations (`stages.yaml`), so one
scenario runs on both backends. kbatchd connects with a ServiceAccount token bound to
`config/rbac.yaml`, as on a real cluster; tests use the admin kubeconfig.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import yaml

from daemon.sim import topology as sim_topology

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parent.parent
RBAC: Final = REPO / "config" / "rbac.yaml"
START_TIMEOUT: Final = 120.0
# `ControlPlane.start(audit=True)`: every request kube-apiserver serves, at level Metadata (who,
# what verb on which object, the answer's code; no bodies), one JSON line each in
# `ControlPlane.audit_log`. RequestReceived is left out: a request's ResponseComplete (or a
# watch's ResponseStarted) already carries when it came.
AUDIT_POLICY: Final = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


# Where kube-apiserver keeps objects in etcd, and a key of the tests' own beyond any resource's.
PREFIX: Final = "/registry/"
PREFIX_END: Final = "/registry0"  # the first key past every "/registry/…"
END_KEY: Final = "/registry/kbatchd-tests/end"
MOVED_KEY: Final = "/kbatchd-tests/revision"


class ControlPlaneError(Exception):
    """The control plane could not be built or started; the message names the step."""


def _versions() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key] = value.strip('"')
    return values


VERSIONS: Final = _versions()
KUBERNETES: Final = tuple(VERSIONS["K8S_VERSIONS"].split())


def build(*versions: str) -> Path:
    """Build (or find cached) every binary; the cache directory."""
    done = subprocess.run(
        ["bash", str(HERE / "build.sh"), *versions],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise ControlPlaneError(lines[-1] if lines else f"build.sh exited {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Profile:
    """What the cluster serves: the workload-aware scheduling API (its gates and
    runtime-config) and the JobSet CRDs."""

    scheduling: bool = True
    jobset_crds: bool = True

    @property
    def name(self) -> str:
        parts = [("" if self.scheduling else "no-") + "scheduling"]
        parts.append(("" if self.jobset_crds else "no-") + "jobset")
        return ",".join(parts)


def gates_and_runtime_config(version: str, profile: Profile) -> tuple[str, str]:
    """`--feature-gates` for every component and the apiserver's `--runtime-config`, per
    release: 1.37 folded 1.36's gang gates into GenericWorkload and removed them."""
    if not profile.scheduling:
        return "", ""
    if version.startswith("1.36."):
        gates = "GenericWorkload,GangScheduling,WorkloadAwarePreemption,"
        gates += "TopologyAwareWorkloadScheduling,WorkloadWithJob"
        runtime = "scheduling.k8s.io/v1alpha2=true"
    else:
        gates = "GenericWorkload,TopologyAwareWorkloadScheduling,CompositePodGroup,"
        gates += "PodGroupPreemptionPolicy,WorkloadWithJob"
        runtime = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
    return ",".join(f"{g}=true" for g in gates.split(",")), runtime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(pki: Path) -> None:
    """A CA, the apiserver's serving certificate (127.0.0.1, localhost), an admin client
    certificate (group system:masters) and the ServiceAccount signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    ca, key = pki / "ca.crt", pki / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj",
             "/CN=kbatchd-test-ca", "-keyout", str(key), "-out", str(ca))  # fmt: skip
    ext = pki / "serving.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    client_ext = pki / "client.ext"
    client_ext.write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, extensions in (
        ("apiserver", "/CN=kube-apiserver", ext),
        ("admin", "/O=system:masters/CN=kbatchd-test-admin", client_ext),
    ):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", str(pki / f"{name}.key"), "-out", str(pki / f"{name}.csr"))  # fmt: skip
        _openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(ca), "-CAkey",
                 str(key), "-CAcreateserial", "-days", "30", "-extfile", str(extensions),
                 "-out", str(pki / f"{name}.crt"))  # fmt: skip
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "real",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
        "current-context": "real",
    }
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path


@dataclass
class _Process:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ControlPlane:
    """One running control plane. `start` returns it serving; `stop` ends every process."""

    version: str
    root: Path
    profile: Profile
    topology: str
    audit: bool = False
    history: bool = False
    server: str = ""
    admin_kubeconfig: Path = field(default_factory=Path)
    kbatchd_kubeconfig: Path = field(default_factory=Path)
    _cache: Path = field(default_factory=Path)
    _etcd: str = ""
    _processes: list[_Process] = field(default_factory=list)
    _files: ExitStack = field(default_factory=ExitStack)
    # What `start_kueue_manager` created outside the plane's root, to remove on its stop.
    _kueue_made: Path | None = None

    @classmethod
    def start(
        cls,
        version: str,
        root: Path,
        *,
        profile: Profile | None = None,
        topology: str = "blocks=1,racks=2,hosts=4,gpus=8",
        cache: Path | None = None,
        audit: bool = False,
        history: bool = False,
        beside: ControlPlane | None = None,
    ) -> ControlPlane:
        """`audit`: kube-apiserver writes an audit log (`AUDIT_POLICY`) to `audit_log`.
        `history`: etcd keeps every revision (kube-apiserver never compacts it) and objects are
        stored as JSON, so that `changes` can read every change the cluster made.
        `beside`: another cluster whose etcd this one shares, under a key prefix of its own
        (``/registry-<root's name>``), as several clusters of a test share one etcd; stop it
        after this one."""
        cache = cache or build(version)
        plane = cls(version, root, profile or Profile(), topology, audit, history)
        if beside is not None:
            plane._etcd = beside._etcd
        try:
            plane._start(cache)
        except BaseException:
            plane.stop()
            raise
        return plane

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.root / f"{name}.log"
        self._processes.append(_Process(name, argv, self._popen(argv, log), log))

    def _process(self, name: str) -> _Process:
        (process,) = (p for p in self._processes if p.name == name)
        return process

    def _popen(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        out: IO[bytes] = self._files.enter_context(log.open("ab"))
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call of etcd's JSON gateway (keys and values base64, as it wants them)."""
        request = urllib.request.Request(
            self._etcd + path, data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def compact_history(self) -> int:
        """Compact etcd at its current revision, as kube-apiserver does every few minutes: a
        watch from any older resourceVersion is then answered 410 Gone. The revision."""
        revision = self.revision()
        self._etcd_call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def revision(self) -> int:
        """etcd's current revision (every write moves it on)."""
        answer = self._etcd_call("/v3/kv/range", {"key": _b64text(END_KEY)})
        return int(answer["header"]["revision"])

    def objects_at(self, revision: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """Every object the cluster held at `revision` (0, etcd's word for now: what it holds
        now), with the revision it was last written at (its resourceVersion). Needs
        `history`."""
        answer = self._etcd_call(
            "/v3/kv/range",
            {"key": _b64text(PREFIX), "range_end": _b64text(PREFIX_END), "revision": revision},
        )
        return [
            (int(kv["mod_revision"]), obj)
            for kv in answer.get("kvs", ())
            if (obj := _stored_object(kv)) is not None
        ]

    def changes(self, since: int) -> list[tuple[str, int, dict[str, Any]]]:
        """Every change of an object after revision `since`, in order, as etcd recorded it:
        (ADDED, MODIFIED or DELETED, its revision, the object written or deleted). Needs
        `history`.

        etcd streams a watch from `since` until told to stop; a key written now marks where
        the history read ends."""
        end = self._etcd_call("/v3/kv/put", {"key": _b64text(END_KEY), "value": _b64text("end")})
        last = int(end["header"]["revision"])
        create = {
            "key": _b64text(PREFIX),
            "range_end": _b64text(PREFIX_END),
            "start_revision": since + 1,
            "prev_kv": True,
        }
        request = urllib.request.Request(
            self._etcd + "/v3/watch", data=json.dumps({"create_request": create}).encode()
        )
        found: list[tuple[str, int, dict[str, Any]]] = []
        with urllib.request.urlopen(request, timeout=60) as stream:
            for line in stream:
                result = json.loads(line)["result"]
                if result.get("canceled"):
                    raise ControlPlaneError(f"etcd ended the history read: {result}")
                for event in result.get("events", ()):
                    kv = event["kv"]
                    revision = int(kv["mod_revision"])
                    if revision >= last:
                        return found
                    # A watch's words: the default type, PUT, is left out of the JSON.
                    if event.get("type") == "DELETE":
                        change, obj = "DELETED", _stored_object(event["prev_kv"])
                    else:
                        created = kv["create_revision"] == kv["mod_revision"]
                        change, obj = ("ADDED" if created else "MODIFIED"), _stored_object(kv)
                    if obj is not None:
                        found.append((change, revision, obj))
        raise ControlPlaneError("etcd's history ended before its end mark")

    def restart_apiserver(self) -> None:
        """Kill kube-apiserver (a graceful stop would wait out every open watch) and start it
        again on the same port: every watch breaks, and the new watch cache begins at the
        current revision, so a client resuming an older resourceVersion is answered 410 Gone.

        etcd's revision is moved on while no API server runs: a client whose last
        resourceVersion was the newest revision (a bookmark just before the kill) would
        otherwise resume exactly at the new cache's start, and be served, not refused.

        kwok is restarted after it (`_restart_kwok`): a status write the kill cut off failed
        with an error it does not retry."""
        self._kill("kube-apiserver")
        self._etcd_call("/v3/kv/put", {"key": _b64text(MOVED_KEY), "value": _b64text("moved")})
        self._start_again("kube-apiserver")
        self._wait_ready("/readyz")
        self._restart_kwok()

    def stop_etcd(self) -> None:
        """SIGKILL etcd (not for a plane sharing another's etcd, `beside`): kube-apiserver
        keeps running, and what it asks of etcd fails or waits until `start_etcd`."""
        self._kill("etcd")

    def start_etcd(self) -> None:
        """Start the etcd `stop_etcd` killed on its data directory and ports, wait for
        kube-apiserver to be ready again, then restart kwok (`_restart_kwok`): a status write
        of kwok's failed while etcd was down."""
        self._start_again("etcd")
        self._wait_ready("/readyz")
        self._restart_kwok()

    def _restart_kwok(self) -> None:
        """Kill kwok and start it again once its node Leases are gone.

        A kubelet whose status write fails writes it again at its next pod sync; kwok retries
        only a refused connection, a timeout, 429 and 503, and drops the stage on any other
        error, so a pod whose write failed in an outage stays as it was for good. Started
        again, kwok lists every pod and re-arms its stage; the stages' deadlines are absolute
        (stages.yaml), so what fell due during the outage happens at once. The killed kwok's
        node Leases go first: a kwok takes over a node only once it holds the node's Lease,
        and it would wait out the old holder's 40 s."""
        self._kill("kwok")
        status, body = self.request(
            "DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        )
        if status != 200:
            raise ControlPlaneError(f"deleting the node Leases: {status} {body}")
        self._start_again("kwok")

    def _kill(self, name: str) -> None:
        process = self._process(name)
        os.killpg(process.popen.pid, signal.SIGKILL)
        process.popen.wait(timeout=30)

    def _start_again(self, name: str) -> None:
        """Start process `name` again with its arguments (ports, data directory) and log."""
        process = self._process(name)
        process.popen = self._popen(process.argv, process.log)

    def _check_alive(self) -> None:
        for p in self._processes:
            if p.popen.poll() is not None:
                tail = p.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise ControlPlaneError(
                    f"{p.name} {self.version} exited with code {p.popen.returncode}: "
                    + " | ".join(tail)
                )

    def _start_etcd(self, cache: Path) -> None:
        etcd_port, etcd_peer = free_port(), free_port()
        self._etcd = f"http://127.0.0.1:{etcd_port}"
        self._spawn("etcd", [
            str(cache / f"etcd-{VERSIONS['ETCD_VERSION']}" / "etcd"),
            "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])  # fmt: skip

    def _start(self, cache: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        pki = self.root / "pki"
        make_pki(pki)
        gates, runtime = gates_and_runtime_config(self.version, self.profile)
        bin_k8s = cache / f"kubernetes-{self.version}"
        api_port = free_port()
        shared = bool(self._etcd)
        if not shared:
            self._start_etcd(cache)
        self.server = f"https://127.0.0.1:{api_port}"
        apiserver = [
            str(bin_k8s / "kube-apiserver"),
            "--etcd-servers", self._etcd,
            *(["--etcd-prefix", f"/registry-{self.root.name}"] if shared else []),
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            # The `kubernetes` Service's endpoint may not be a loopback address; nothing here
            # reaches the API server through that Service.
            "--endpoint-reconciler-type", "none",
            "--secure-port", str(api_port),
            "--cert-dir", str(self.root / "apiserver-certs"),
            "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "OwnerReferencesPermissionEnforcement",
            "--allow-privileged",
            "--v", "1",
        ]  # fmt: skip
        if gates:
            apiserver += ["--feature-gates", gates, "--runtime-config", runtime]
        if self.history:
            apiserver += [
                "--storage-media-type", "application/json",
                "--etcd-compaction-interval", "0",
            ]  # fmt: skip
        if self.audit:
            policy = self.root / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            apiserver += [
                "--audit-policy-file", str(policy),
                "--audit-log-path", str(self.audit_log),
                "--audit-log-format", "json",
                "--audit-log-maxsize", "0",  # one file, never rotated: a reader counts it all
            ]  # fmt: skip
        self._spawn("kube-apiserver", apiserver)
        self.admin_kubeconfig = kubeconfig(
            self.root / "admin.kubeconfig",
            self.server,
            pki / "ca.crt",
            {
                "client-certificate-data": _b64(pki / "admin.crt"),
                "client-key-data": _b64(pki / "admin.key"),
            },
        )
        self._wait_ready("/readyz")
        admin = str(self.admin_kubeconfig)
        feature = ["--feature-gates", gates] if gates else []
        self._spawn("kube-controller-manager", [
            str(bin_k8s / "kube-controller-manager"), "--kubeconfig", admin,
            "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--use-service-account-credentials=false",
            "--service-account-private-key-file", str(pki / "sa.key"),
            "--root-ca-file", str(pki / "ca.crt"),
            "--cluster-signing-cert-file", str(pki / "ca.crt"),
            "--cluster-signing-key-file", str(pki / "ca.key"),
            "--v", "1", *feature,
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            str(bin_k8s / "kube-scheduler"), "--kubeconfig", admin,
            "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--v", "1", *feature,
        ])  # fmt: skip
        kwok = cache / f"kwok-{VERSIONS['KWOK_VERSION']}"
        self._spawn("kwok", [
            str(kwok / "kwok"), "--kubeconfig", admin,
            "--config", str(kwok / "node-stages.yaml"), "--config", str(HERE / "stages.yaml"),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--server-address", f"127.0.0.1:{free_port()}",
            "--node-lease-duration-seconds", "40",
        ])  # fmt: skip
        self._cache = cache
        if self.profile.jobset_crds:
            self.install_jobset_crds()
        for node in sim_topology.load(self.topology):
            node["metadata"].setdefault("annotations", {})["kwok.x-k8s.io/node"] = "fake"
            self.apply(node)
        self.kbatchd_kubeconfig = self._kbatchd_credentials()
        self._wait_default_service_account()

    def install_jobset_crds(self) -> bool:
        """sigs.k8s.io/jobset's CRDs, created and established."""
        crds = self._cache / f"jobset-{VERSIONS['JOBSET_VERSION']}"
        for crd in sorted(crds.glob("*.yaml")):
            self.apply_file(crd)
        self._wait_established("jobsets.jobset.x-k8s.io")
        # Established comes before discovery lists the kind: a client reading discovery
        # in between would find no JobSets.
        self._wait("JobSets in discovery", lambda: self._discovered("jobset.x-k8s.io/v1alpha2"))
        return True

    # -- talking to it ---------------------------------------------------------------------

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.root / "pki" / "ca.crt"))
        pki = self.root / "pki"
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """One admin request; (status, decoded JSON body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, context=self._tls(), timeout=30) as response:
                payload = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            payload, status = exc.read(), exc.code
        try:
            return status, json.loads(payload) if payload else None
        except json.JSONDecodeError:
            return status, payload.decode(errors="replace")

    def _wait(self, what: str, check: Any, within: float = START_TIMEOUT) -> Any:
        """Re-check `check` until truthy, failing with `what` after `within` s (the processes
        are checked alive on every round: one that died fails at once with its last lines)."""
        deadline = time.monotonic() + within
        delay = 0.05
        while True:
            self._check_alive()
            try:
                found = check()
            except (OSError, ssl.SSLError):
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{what} not reached within {within:.0f} s ({self.version})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _wait_ready(self, path: str) -> None:
        self._wait(f"kube-apiserver {path}", lambda: self.request("GET", path)[0] == 200)

    def _wait_established(self, crd: str) -> None:
        def established() -> bool:
            status, body = self.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
            )
            if status != 200:
                return False
            conditions = (body.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        self._wait(f"CRD {crd} established", established)

    def _wait_default_service_account(self) -> None:
        self._wait(
            "the default ServiceAccount",
            lambda: (
                self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
            ),
        )

    def apply(self, obj: dict[str, Any]) -> None:
        """Create `obj` (server-side apply would do too; create keeps the request plain)."""
        status, body = self.request("POST", collection_path(obj), obj)
        if status not in (200, 201, 409):
            raise ControlPlaneError(
                f"creating {obj['kind']} {obj['metadata'].get('name')}: HTTP {status}: {body}"
            )

    def apply_file(self, path: Path) -> None:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                self.apply(document)

    def _kbatchd_credentials(self) -> Path:
        """config/rbac.yaml applied, and a kubeconfig with a token of its ServiceAccount."""
        self.apply_file(RBAC)
        status, body = self.request(
            "POST",
            "/api/v1/namespaces/kube-system/serviceaccounts/kbatchd/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 86400}},
        )  # fmt: skip
        if status != 201:
            raise ControlPlaneError(f"TokenRequest for kbatchd: HTTP {status}: {body}")
        return kubeconfig(
            self.root / "kbatchd.kubeconfig",
            self.server,
            self.root / "pki" / "ca.crt",
            {"token": body["status"]["token"]},
        )

    def _discovered(self, group_version: str) -> bool:
        status, body = self.request("GET", "/apis")
        offered = {v["groupVersion"] for g in body.get("groups", []) for v in g["versions"]}
        return status == 200 and group_version in offered and bool(self.served(group_version))

    def served(self, group_version: str) -> list[str]:
        """The resource names `group_version` serves (empty when it is not served)."""
        prefix = "/api/" if "/" not in group_version else "/apis/"
        status, body = self.request("GET", prefix + group_version)
        return [r["name"] for r in body.get("resources", [])] if status == 200 else []

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (written only when started with `audit`)."""
        return self.root / "audit.log"

    def pid(self, name: str) -> int:
        """The process id of the running component `name` (e.g. "kube-controller-manager")."""
        return self._process(name).popen.pid

    def logs(self, name: str, lines: int = 20) -> str:
        text = (self.root / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def start_jobset_manager(self, feature_gates: dict[str, bool] | None = None) -> int:
        """Upstream's JobSet controller manager (`build.sh --jobset-manager`) against this plane,
        with the admin kubeconfig and the client QPS and burst it ships with; leader election and
        its own certificate rotation off. Its webhooks (JobSet defaulting and validation, the
        JobSet pods' mutation and validation) are served on loopback with the API server's
        serving certificate (127.0.0.1, signed by the plane's CA) and registered by URL, as its
        manifests register them by Service, so every JobSet and JobSet pod created while it runs
        passes through them. Returns once its readiness probe (webhook server started) answers;
        its pid."""
        jobset = f"jobset-manager-{VERSIONS['JOBSET_VERSION']}"
        home = build("--jobset-manager", self.version) / jobset
        pki, certs = self.root / "pki", self.root / "jobset-certs"
        certs.mkdir(exist_ok=True)
        shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
        shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
        webhook, probe = free_port(), free_port()
        configuration = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
            "featureGates": feature_gates or {},
        }
        config = self.root / "jobset-manager.yaml"
        config.write_text(json.dumps(configuration))
        self._spawn("jobset-manager", [
            str(home / "manager"), "--kubeconfig", str(self.admin_kubeconfig),
            "--config", str(config), "--zap-devel=false",
        ])  # fmt: skip
        self._wait("the JobSet manager ready", lambda: _probe_ready(probe))
        self._register_webhooks(_jobset_webhooks(home / "webhook", f"https://127.0.0.1:{webhook}"))
        return self.pid("jobset-manager")

    def stop_jobset_manager(self) -> None:
        """Its webhook configurations removed (with them in place and nothing serving them, every
        JobSet and JobSet pod would be refused), then the manager stopped."""
        self._remove_webhooks("jobset")
        self._end("jobset-manager")

    def start_kueue_manager(self, qps: float, burst: int) -> int:
        """Kueue's manager (`build.sh --kueue-manager`, the pinned KUEUE_VERSION) against this
        plane, with the admin kubeconfig, the configuration of its install (its shipped
        `controller_manager_config.yaml` and `--zap-log-level=2`) except: the batch/v1 Job
        integration only, client `qps` and `burst`, leader election, certificate management,
        metrics and the visibility server off (the visibility API serves pending-workload
        listings, no part of admission, and needs an APIService of its own).
        TopologyAwareScheduling is a beta gate, on by default; it is named on anyway.

        Its CRDs are installed first (those its install gives a conversion webhook get it, by
        URL). Its webhooks (the Job integration's, those of its own kinds, and the no-op ones
        of the integrations left off) are served on loopback with the API server's serving
        certificate and registered by URL, as its manifests register them by Service. Returns
        once its readiness probe (webhook server started) answers; its pid."""
        home = build("--kueue-manager", self.version) / f"kueue-manager-{VERSIONS['KUEUE_VERSION']}"
        pki, certs = self.root / "pki", self.root / "kueue-certs"
        certs.mkdir(exist_ok=True)
        shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
        shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
        # Without its own certificate management the manager reads a metrics certificate from
        # a fixed path (its Deployment mounts a Secret there) before anything else, served or
        # not: with metrics off, the file is read and never used. `stop_kueue_manager` removes
        # what this made there.
        if not KUEUE_METRICS_CERTS.parent.parent.exists():
            self._kueue_made = KUEUE_METRICS_CERTS.parent.parent
        try:
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pki / "apiserver.crt", KUEUE_METRICS_CERTS / "tls.crt")
            shutil.copyfile(pki / "apiserver.key", KUEUE_METRICS_CERTS / "tls.key")
        except OSError as exc:
            raise ControlPlaneError(
                f"Kueue's manager reads its metrics certificate from {KUEUE_METRICS_CERTS}, "
                f"which cannot be written here: {exc}"
            ) from exc
        webhook, probe = free_port(), free_port()
        server = f"https://127.0.0.1:{webhook}"
        for crd in _kueue_crds(home / "crd", server, _b64(pki / "ca.crt")):
            self.apply(crd)
        for plural in (
            "workloads",
            "clusterqueues",
            "resourceflavors",
            "topologies",
            "localqueues",
        ):
            self._wait_established(f"{plural}.kueue.x-k8s.io")
        self._wait("Kueue in discovery", lambda: self._discovered("kueue.x-k8s.io/v1beta2"))
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
        shipped = yaml.safe_load((home / "controller_manager_config.yaml").read_text())
        configuration = {
            **shipped,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
            "clientConnection": {"qps": qps, "burst": burst},
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"TopologyAwareScheduling": True, "VisibilityOnDemand": False},
        }
        config = self.root / "kueue-manager.yaml"
        config.write_text(json.dumps(configuration))
        self._spawn("kueue-manager", [
            str(home / "manager"), "--kubeconfig", str(self.admin_kubeconfig),
            "--config", str(config), "--zap-log-level=2",
        ])  # fmt: skip
        self._wait("the Kueue manager ready", lambda: _probe_ready(probe))
        self._register_webhooks(_kueue_webhooks(home / "webhook", server))
        return self.pid("kueue-manager")

    def stop_kueue_manager(self) -> None:
        """Its webhook configurations removed (with them in place and nothing serving them,
        every Job and pod would be refused), then the manager stopped."""
        self._remove_webhooks("kueue")
        self._end("kueue-manager")
        if self._kueue_made is not None:
            shutil.rmtree(self._kueue_made, ignore_errors=True)
            self._kueue_made = None

    def _register_webhooks(self, documents: list[dict[str, Any]]) -> None:
        """Register webhook configurations whose hooks are addressed by URL, trusting the
        plane's CA (what a manager serves on loopback with the serving certificate)."""
        ca = _b64(self.root / "pki" / "ca.crt")
        for document in documents:
            document["webhooks"] = [
                {**hook, "clientConfig": {**hook["clientConfig"], "caBundle": ca}}
                for hook in document["webhooks"]
            ]
            path = f"/apis/admissionregistration.k8s.io/v1/{document['kind'].lower()}s"
            status, body = self.request("POST", path, document)
            if status != 201:
                raise ControlPlaneError(f"registering {document['kind']}: HTTP {status}: {body}")

    def _remove_webhooks(self, prefix: str) -> None:
        """Remove the mutating and validating configurations `PREFIX-…-webhook-configuration`."""
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for name in (
                f"{prefix}-mutating-webhook-configuration",
                f"{prefix}-validating-webhook-configuration",
            ):
                self.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")

    def _end(self, name: str) -> None:
        """The component `name` stopped (SIGTERM, SIGKILL after 15 s) and forgotten."""
        process = self._process(name)
        os.killpg(process.popen.pid, signal.SIGTERM)
        try:
            process.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait()
        self._processes.remove(process)

    def stop(self) -> None:
        for p in reversed(self._processes):
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGTERM)
        for p in reversed(self._processes):
            try:
                p.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()
        self._processes.clear()
        self._files.close()
        shutil.rmtree(self.root / "etcd", ignore_errors=True)


def _jobset_webhooks(directory: Path, server: str) -> list[dict[str, Any]]:
    """sigs.k8s.io/jobset's webhook configurations as its kustomization builds them (its
    patches replace whole webhooks, to give the pod webhooks their object selector), named as
    its default install names them (prefix `jobset-`), each webhook addressed at `server` plus
    its path instead of the Service."""
    documents = [d for d in yaml.safe_load_all((directory / "manifests.yaml").read_text()) if d]
    for document in documents:
        prefix = document["kind"].removesuffix("WebhookConfiguration").lower()
        for patch in sorted((directory / "patches").glob(f"{prefix}-*.yaml")):
            for operation in yaml.safe_load(patch.read_text()):
                where = operation["path"].split("/")
                if operation["op"] != "replace" or where[1] != "webhooks":
                    raise ControlPlaneError(f"{patch.name}: unexpected patch {operation}")
                document["webhooks"][int(where[2])] = operation["value"]
        document["metadata"]["name"] = "jobset-" + document["metadata"]["name"]
        for hook in document["webhooks"]:
            hook["clientConfig"] = {"url": server + hook["clientConfig"]["service"]["path"]}
    return documents


def _b64text(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _stored_object(kv: dict[str, Any]) -> dict[str, Any] | None:
    """The object an etcd key-value holds (stored as JSON: `history`); None for a key that
    holds none (the end mark, an allocator's bitmap)."""
    value = base64.b64decode(kv.get("value", ""))
    if not value.startswith(b"{"):
        return None
    obj: dict[str, Any] = json.loads(value)
    return obj if "kind" in obj and "uid" in obj.get("metadata", {}) else None


def _probe_ready(port: int) -> bool:
    """Whether a manager's readiness probe on `port` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


def _kueue_crds(directory: Path, server: str, ca_bundle: str) -> list[dict[str, Any]]:
    """sigs.k8s.io/kueue's CRDs as its kustomization builds them: those it patches with a
    conversion webhook get one, addressed at `server` plus its path instead of the Service."""
    crds = {}
    for path in sorted((directory / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["metadata"]["name"]] = crd
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for entry in listed.get("patches") or ():
        patch = yaml.safe_load((directory / entry["path"]).read_text())
        conversion = patch["spec"]["conversion"]
        config = conversion["webhook"]["clientConfig"]
        config["url"] = server + config.pop("service")["path"]
        config["caBundle"] = ca_bundle
        crds[patch["metadata"]["name"]]["spec"]["conversion"] = conversion
    return list(crds.values())


def _kueue_webhooks(directory: Path, server: str) -> list[dict[str, Any]]:
    """sigs.k8s.io/kueue's webhook configurations as its kustomization builds them (its patches
    merge, webhook by webhook, a namespace selector into the pod, Deployment and StatefulSet
    webhooks), named as its default install names them (prefix `kueue-`), each webhook
    addressed at `server` plus its path instead of the Service."""
    documents = [d for d in yaml.safe_load_all((directory / "manifests.yaml").read_text()) if d]
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for entry in listed.get("patches") or ():
        patch = yaml.safe_load(entry["patch"])
        (document,) = (d for d in documents if d["kind"] == patch["kind"])
        hooks = {hook["name"]: hook for hook in document["webhooks"]}
        for change in patch["webhooks"]:
            hooks[change["name"]].update(change)
    for document in documents:
        document["metadata"]["name"] = "kueue-" + document["metadata"]["name"]
        for hook in document["webhooks"]:
            hook["clientConfig"] = {"url": server + hook["clientConfig"]["service"]["path"]}
    return documents


# Where Kueue's manager reads its metrics certificate when it manages none itself (its
# cmd/kueue/main.go names the path; no flag or setting moves it).
KUEUE_METRICS_CERTS: Final = Path("/etc/kueue/metrics/certs")

_CLUSTER_SCOPED: Final = {
    "Node", "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "PriorityClass", "Topology", "ResourceFlavor", "ClusterQueue",
}  # fmt: skip
_PLURALS: Final = {
    "CustomResourceDefinition": "customresourcedefinitions",
    "PriorityClass": "priorityclasses",
    "Topology": "topologies",
}


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection an object is created in."""
    group_version, kind = obj["apiVersion"], obj["kind"]
    root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = _PLURALS.get(kind, kind.lower() + "s")
    if kind in _CLUSTER_SCOPED:
        return f"{root}/{plural}"
    namespace = obj["metadata"].get("namespace", "default")
    return f"{root}/namespaces/{namespace}/{plural}"
