"""The chaos driver: runs a real bgd with real apps, a steady workload (pushes, fetches,
transfers) and a seeded series of faults, and records what it did and what it was told.

Usage (run.sh does all of this):
    nemesis.py --run-dir DIR --bin .build/debug --origin http://127.0.0.1:PORT [--faults N] [--seed S] [--quick]

Needs the interop venv's python (aioapns). Everything it writes is in --run-dir:

    meta.json          the campaign: seed, apps, tokens, files, ports, which fault kinds ran or why not
    pushes.jsonl       every push: content-id, apns-id, app, bgd life, send and answer time, status, reason
    fetches.jsonl      every `bgctl simulate fetch`: app, run id or the error
    transfers.jsonl    every transfer handed over: kind, app, url, expected SHA-256, id or the error
    faults.jsonl       every fault: kind, start and end time, what happened
    lives.jsonl        every bgd process: how it was started, how it ended, whether we caused the end
    bgd/life-NNN.log   each bgd process's output
    state/             bgd's state directory (bgd.sqlite; containers/ and transfers/ link to disk)

checker.py reads only these, the SQLite file and the apps' fixture.log files.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import logging
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection as apns_connection
from aioapns.exceptions import ConnectionClosed, ConnectionError as APNsConnectionError

FAILPOINTS = [
    "push.afterCommitBeforeAnswer",
    "run.afterStartCommit",
    "run.afterLaunch",
    "run.afterResultCommit",
    "event.afterAckCommit",
    "transfer.afterCheckpointFsync",
    "transfer.afterRename",
    "transfer.afterCompletionCommit",
    "transfer.afterUploadCopy",
    "transfer.afterUploadAccepted",
]
FAULT_WEIGHTS = {"kill": 3, "failpoint": 3, "sigstop": 1, "app-kill": 2, "volume-full": 1, "clock": 1, "fsync-eio": 1}
KEY_ID, TEAM_ID = "ABCDEFGHIJ", "TEAM123456"
TASK_ID = "com.example.fixture.processing"  # a BGTaskScheduler identifier the fixture handles
FETCH_BUDGET_S = 5  # short, so a SIGSTOP of 8 s outlasts a run's whole budget
SIGSTOP_S = 8


def now() -> float:
    return time.time()


class Journal:
    """Append-only JSON lines, flushed at once: a harness killed mid-run still leaves evidence."""

    def __init__(self, path: Path):
        self.handle = open(path, "a", buffering=1)

    def write(self, record: dict) -> None:
        self.handle.write(json.dumps(record, sort_keys=True) + "\n")


class UnixHTTP(http.client.HTTPConnection):
    """bgd's API is HTTP/1.1 on a Unix socket; http.client only needs another connect()."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def api_call(sock: str, method: str, path: str, body: dict | None = None, timeout: float = 10,
             token: str | None = None) -> tuple[int | None, object]:
    """One API request; (status, decoded body) or (None, the error) when bgd did not answer.
    With `token`, as that app; without, as the operator."""
    conn = UnixHTTP(sock, timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    try:
        # Operator endpoints want the token bgd writes beside its socket (bgctl sends it too);
        # read per call, since each life may write a new one.
        headers["Authorization"] = "Bearer " + (token or Path(sock + ".operator-token").read_text().strip())
    except OSError:
        pass
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")
    except OSError as error:
        return None, f"{type(error).__name__}: {error}"
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# How the `faketime` wrapper reports a child killed by a signal ("Caught Killed"), back to a status.
SIGNAL_BY_NAME = {signal.strsignal(s): -int(s) for s in signal.Signals if signal.strsignal(s)}


class SharedToken(apns_connection.JWTAuthorizationHeaderProvider):
    """aioapns mints a provider token per connection; APNs (and bgd) answer 429
    TooManyProviderTokenUpdates to a newer token for the same key within 20 minutes. A real
    provider shares one token across connections; so do we, renewed every 30 minutes."""

    _header: str | None = None
    _issued = 0.0

    def get_header(self) -> str:
        cls = SharedToken
        if cls._header is None or cls._issued < now() - 30 * 60:
            cls._header = super().get_header()
            cls._issued = now()
        return cls._header


apns_connection.JWTAuthorizationHeaderProvider = SharedToken


class Bgd:
    """bgd's lives: each start is a life with its own log, and each end is recorded with who
    caused it, so the checker can tell an injected crash from one we did not cause."""

    def __init__(self, campaign: "Campaign"):
        self.c = campaign
        self.proc: asyncio.subprocess.Process | None = None
        self.pid = 0  # bgd's own pid: under the faketime wrapper, the wrapper's child
        self.life = 0
        self.record: dict = {}
        self.expected_end: str | None = None  # what we did to end it: sigkill, sigterm, or a failpoint
        self.watcher: asyncio.Task | None = None
        self.started_at = 0.0
        self.exited = asyncio.Event()

    def argv(self) -> list[str]:
        c = self.c
        return [
            str(c.bin / "bgd"), "--state-dir", str(c.state), "--socket", c.sock,
            "--push-host", "127.0.0.1", "--push-port", str(c.push_port),
            "--durability", c.args.durability, "--log-level", "info", "--log-format", "text",
            "--fetch-budget", f"{FETCH_BUDGET_S}s", "--expiration-lead", "1s", "--kill-grace", "2s",
            # Pushes are the workload, not the throttle: let nearly every push wake its app.
            "--push-wakes-per-hour", "100000", "--push-token-rate", "1000",
            # Small checkpoints and a rate cap: downloads span several faults and resume often.
            "--transfer-checkpoint", "1MiB", "--transfer-rate-limit", "12MiB", "--transfer-read-timeout", "10s",
            "--conditions", "unconstrained",
        ]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, mode: str = "normal", failpoint: str | None = None) -> bool:
        """Starts a life and waits until it serves the socket and the push port; False if it
        never became ready (recorded, and the process killed)."""
        assert not self.alive
        self.life += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BGD_", "FAKETIME", "LD_PRELOAD"))}
        if failpoint:
            env["BGD_FAILPOINT"] = f"{failpoint}:once"
        if c_shim := self.c.args.fsync_shim:
            if mode != "clock":  # faketime brings its own LD_PRELOAD
                env["LD_PRELOAD"] = c_shim
                env["CHAOS_FSYNC_EIO"] = str(self.c.fsync_trigger)
        argv = self.argv()
        if mode == "clock":
            # The wall clock 2 days ahead for this life; monotonic time untouched. Through the
            # `faketime` wrapper, not LD_PRELOAD alone: the library's constructor then setenv()s
            # FAKETIME_SHARED, which moves `environ`, and Swift's runtime, which finds argv from
            # `environ`, sees no arguments at all (swiftlang/swift#76080); the wrapper presets it.
            argv = ["faketime", "-f", "+2d"] + argv
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        log_path = self.c.run / "bgd" / f"life-{self.life:03d}.log"
        log = open(log_path, "ab")
        self.started_at = now()
        self.proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self.pid = self.proc.pid
        if mode == "clock":
            self.pid = await self._child_of(self.proc) or self.proc.pid
        self.expected_end = None
        self.exited = asyncio.Event()
        self.record = {
            "life": self.life, "pid": self.pid, "mode": mode, "failpoint": failpoint,
            "started_at": self.started_at, "log": str(log_path.relative_to(self.c.run)),
        }
        self.watcher = asyncio.create_task(self._watch(self.proc, self.record))
        ready = await self._wait_ready(self.proc)
        self.record["ready_at"] = now() if ready else None
        if not ready and self.alive:
            await self.kill(signal.SIGKILL, "not ready")
        return ready

    @staticmethod
    async def _child_of(proc) -> int | None:
        for _ in range(100):
            try:
                children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            except OSError:
                return None
            if children:
                return int(children[0])
            await asyncio.sleep(0.02)
        return None

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    async def _wait_ready(self, proc) -> bool:
        deadline = now() + 30
        while now() < deadline and proc.returncode is None:
            status, body = await asyncio.to_thread(api_call, self.c.sock, "GET", "/v1/status", None, 2)
            if status == 200 and isinstance(body, dict) and body.get("processID") == self.pid:
                break
            await asyncio.sleep(0.1)
        else:
            return False
        while now() < deadline and proc.returncode is None:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.c.push_port), 1)
                writer.close()
                return True
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(0.1)
        return False

    async def _watch(self, proc, record: dict) -> None:
        code = await proc.wait()
        tail = (self.c.run / record["log"]).read_text(errors="replace").splitlines()[-8:]
        if record["mode"] == "clock":  # the wrapper's status; its last words name bgd's signal
            caught = [line.removeprefix("Caught ").strip() for line in tail if line.startswith("Caught ")]
            code = SIGNAL_BY_NAME.get(caught[-1], code) if caught else code
        record.update(ended_at=now(), returncode=code, ended_by=self.expected_end)
        # Ours: a SIGKILL we sent or a failpoint's self-kill, or a clean exit after our SIGTERM.
        ours = (self.expected_end == "sigkill" and code == -signal.SIGKILL) or (self.expected_end == "sigterm" and code == 0)
        if record.get("failpoint") and self.expected_end is None:
            # A failpoint ends bgd by itself: SIGKILL is what we asked for; any other end counts
            # as ours only if the log says the failpoint fired.
            if code == -signal.SIGKILL or any(record["failpoint"] in line for line in tail):
                record["ended_by"] = "failpoint"
                ours = True
        record["injected"] = ours
        if not ours:
            record["log_tail"] = tail
            print(f"nemesis: bgd life {record['life']} ended on its own (status {code}, we did: {self.expected_end})", flush=True)
        self.c.lives.write(record)
        self.exited.set()

    async def kill(self, sig: int, why: str) -> None:
        if not self.alive:
            return
        self.expected_end = "sigkill" if sig == signal.SIGKILL else "sigterm"
        self.record["stop_reason"] = why
        self.signal(sig)
        await self.exited.wait()

    async def stop(self, why: str, grace: float = 15) -> None:
        """SIGTERM, and SIGKILL if it has not stopped within `grace` (recorded as a hung stop)."""
        if not self.alive:
            return
        self.expected_end = "sigterm"
        self.record["stop_reason"] = why
        self.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.exited.wait()), grace)
        except asyncio.TimeoutError:
            self.record["hung_on_sigterm"] = True
            print(f"nemesis: bgd life {self.life} did not stop {grace:.0f}s after SIGTERM; killing it", flush=True)
            await self.kill(signal.SIGKILL, why + " (hung on SIGTERM)")

    async def ensure(self) -> None:
        """A bgd is serving: restarted after an exit we did not cause or a life that never got ready."""
        for _ in range(5):
            if self.alive and self.record.get("ready_at"):
                return
            if self.alive:
                await self.kill(signal.SIGKILL, "not serving")
            await asyncio.sleep(0.3)
            if await self.start():
                return
        raise RuntimeError("bgd does not start; see the newest bgd/life-*.log")


class Campaign:
    def __init__(self, args):
        self.args = args
        self.run = Path(args.run_dir).resolve()
        self.bin = Path(args.bin).resolve()
        self.app_binary = Path(args.app or self.bin / "bgd-fixture-app").resolve()
        self.origin = args.origin.rstrip("/")
        self.rng = random.Random(args.seed)  # faults: the same seed gives the same campaign plan
        self.wrng = random.Random(f"workload:{args.seed}")  # workload timing
        self.state = self.run / "state"
        # In a directory of its own: bgd refuses to write a download into its socket's directory.
        self.sock = str(self.run / "sock" / "bgd.sock")
        # While this file exists, bgd's fsyncs fail with EIO (the fsync-eio fault's shim reads it).
        self.fsync_trigger = self.run / "fsync-eio.trigger"
        self.push_port = free_port()
        self.files = json.loads((self.run / "www" / "manifest.json").read_text())
        for sub in ("bgd", "containers", "transfers", "downloads", "uploads", "push", "sock"):
            (self.run / sub).mkdir(exist_ok=True)
        self.pushes = Journal(self.run / "pushes.jsonl")
        self.fetches = Journal(self.run / "fetches.jsonl")
        self.transfers = Journal(self.run / "transfers.jsonl")
        self.faults = Journal(self.run / "faults.jsonl")
        self.lives = Journal(self.run / "lives.jsonl")
        self.tasks = Journal(self.run / "tasks.jsonl")
        self.app_tokens: dict[str, str] = {}
        self.bgd = Bgd(self)
        self.apps = [f"com.example.chaos{n}" for n in (1, 2, 3)]
        self.device_tokens: dict[str, str] = {}
        self.clients: dict[str, APNs] = {}
        self.content_ids = itertools.count(1)
        self.transfer_numbers = itertools.count(1)
        self.stop_workload = asyncio.Event()
        self.pending_pushes: set[asyncio.Task] = set()
        self.side_tasks: set[asyncio.Task] = set()  # work a fault starts and does not wait for
        self.tmpfs = False
        self.skipped: dict[str, str] = {}
        self.meta: dict = {}
        self.deadline = now() + args.time_limit

    # --- setup ----------------------------------------------------------------------------

    def mount_state(self) -> None:
        """The state directory on a small tmpfs, so the full-volume fault can fill it. The apps'
        containers and the transfer files stay on disk (symlinks): the volume-full fault is about
        the store (SQLITE_FULL), and an app's fixture.log cut by ENOSPC would read as a lost push."""
        self.state.mkdir(exist_ok=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.args.tmpfs_mib}m,mode=0700", "tmpfs", str(self.state)],
            capture_output=True, text=True)
        if result.returncode == 0:
            self.tmpfs = True
        else:
            self.skipped["volume-full"] = f"mount -t tmpfs failed: {result.stderr.strip() or result.returncode}"
        for sub in ("containers", "transfers"):
            link = self.state / sub
            if not link.exists():
                link.symlink_to(self.run / sub)

    def unmount_state(self) -> None:
        """Copies the (stopped) store out of the tmpfs into the same path, for the checker."""
        if not self.tmpfs:
            return
        saved = self.run / "state.saved"
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(self.state, saved, symlinks=True, ignore=shutil.ignore_patterns("filler"))
        for attempt in range(20):
            if subprocess.run(["umount", str(self.state)], capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["umount", "-l", str(self.state)], capture_output=True)
        self.tmpfs = False
        for item in saved.iterdir():
            os.rename(item, self.state / item.name)
        saved.rmdir()

    async def bgctl(self, *argv: str, timeout: float = 20) -> tuple[int | None, str, str]:
        # The socket by environment: an option after `register … --` would join the app's argv.
        proc = await asyncio.create_subprocess_exec(
            str(self.bin / "bgctl"), *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "BGD_SOCKET": self.sock})
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return None, "", f"bgctl timed out after {timeout}s"
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    async def must(self, *argv: str) -> object:
        """A setup call that has to work; the campaign stops otherwise."""
        split = argv.index("--") if "--" in argv else len(argv)
        argv = argv[:split] + ("--json",) + argv[split:]
        for attempt in range(5):
            code, out, err = await self.bgctl(*argv)
            if code == 0:
                return json.loads(out)
            await asyncio.sleep(0.5)
        raise RuntimeError(f"bgctl {' '.join(argv)}: {err.strip() or out.strip()}")

    async def setup(self) -> None:
        self.mount_state()
        if not shutil.which("faketime"):
            self.skipped["clock"] = "faketime is not installed (apt-get install faketime)"
        if not self.args.fsync_shim:
            self.skipped["fsync-eio"] = "no fsync shim (run.sh builds Chaos/fsync_eio.c with cc)"
        await self.bgd.ensure()
        key = self.run / "push" / "key.p8"
        subprocess.run(
            f"openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out {key}",
            shell=True, check=True)
        for app in self.apps:
            registered = await self.must(
                "register", app, "--interval", "minimum", "--task-identifier", TASK_ID, "--", str(self.app_binary), "newData")
            self.app_tokens[app] = registered["token"]
        await self.must("push", "keys", "add", "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topics", ",".join(self.apps), str(key))
        for app in self.apps:
            self.device_tokens[app] = (await self.must("push", "token", app, "--create"))["token"]
        cert = self.state / "push-gateway.crt"
        for protocol in (apns_connection.APNsProductionClientProtocol, apns_connection.APNsDevelopmentClientProtocol):
            protocol.APNS_SERVER = "127.0.0.1"
            protocol.APNS_PORT = self.push_port
        pem = key.read_text()
        for app in self.apps:
            context = ssl.create_default_context(cafile=str(cert))
            context.check_hostname = False  # the gateway's certificate names localhost; we dial 127.0.0.1
            # One attempt: aioapns would otherwise resend a push whose connection broke, and a
            # push sent twice could not be told from one bgd delivered twice.
            self.clients[app] = APNs(
                key=pem, key_id=KEY_ID, team_id=TEAM_ID, topic=app, use_sandbox=False, ssl_context=context,
                max_connection_attempts=1, max_connections=4)
        self.write_meta()

    def write_meta(self, **extra) -> None:
        self.meta.update(
            seed=self.args.seed, faults_requested=self.args.faults, quick=self.args.quick, origin=self.origin,
            files=self.files, apps=self.apps, device_tokens=self.device_tokens, state_dir=str(self.state),
            containers_dir=str(self.run / "containers"), socket=self.sock, push_port=self.push_port,
            bgd_argv=self.bgd.argv(), failpoints=FAILPOINTS, tmpfs=self.tmpfs or self.meta.get("tmpfs", False),
            skipped=self.skipped, durability=self.args.durability, fetch_budget_s=FETCH_BUDGET_S, **extra)
        (self.run / "meta.json").write_text(json.dumps(self.meta, indent=1, sort_keys=True))

    # --- workload -------------------------------------------------------------------------

    async def send_push(self, app: str, content_id: int) -> None:
        request = NotificationRequest(
            device_token=self.device_tokens[app], message={"aps": {"content-available": 1}, "content-id": content_id},
            priority=5, push_type=PushType.BACKGROUND)
        record = {"cid": content_id, "app": app, "apns_id": request.notification_id, "life": self.bgd.life, "sent_at": now()}
        pool = self.clients[app].pool
        try:
            conn = await asyncio.wait_for(pool.acquire(), 3)
        except (APNsConnectionError, asyncio.TimeoutError, OSError) as error:
            # Nothing went on the wire: bgd was down or stopped.
            record.update(outcome="not-sent", error=type(error).__name__)
            self.pushes.write(record)
            return
        try:
            # No timeout of our own: a late 200 (after SIGCONT) is still a promise to keep. The
            # connection's loss ends the wait; the settle phase ends what is left.
            result = await conn.send_notification(request)
            record.update(outcome="answered", status=int(result.status), reason=result.description, answered_at=now())
        except ConnectionClosed:
            record.update(outcome="connection-closed", answered_at=now())
        except asyncio.CancelledError:
            record.update(outcome="no-answer", answered_at=now())
            self.pushes.write(record)
            raise
        except Exception as error:  # h2 protocol errors and the like: sent, unanswered
            record.update(outcome="error", error=f"{type(error).__name__}: {error}", answered_at=now())
        self.pushes.write(record)

    async def pusher(self, app: str) -> None:
        while not self.stop_workload.is_set():
            task = asyncio.create_task(self.send_push(app, next(self.content_ids)))
            self.pending_pushes.add(task)
            task.add_done_callback(self.pending_pushes.discard)
            await asyncio.sleep(self.wrng.expovariate(self.args.push_rate))

    async def simulate_fetch(self, app: str, why: str) -> None:
        at, life = now(), self.bgd.life
        code, out, err = await self.bgctl("simulate", "fetch", app, "--no-wait", "--json", timeout=15)
        record = {"at": at, "app": app, "why": why, "life": life, "rc": code}
        if code == 0:
            try:
                record["run"] = json.loads(out)["id"]
            except (ValueError, KeyError, TypeError):
                record["error"] = out.strip()[:300]
        else:
            record["error"] = (err or out).strip()[:300]
        self.fetches.write(record)

    async def tasker(self) -> None:
        """BGTaskScheduler, as the app submits it: a processing request now and then, with the
        app's own token. A request submitted while one is pending replaces it (Apple's rule)."""
        while not self.stop_workload.is_set():
            await asyncio.sleep(self.wrng.uniform(3, 7))
            if self.stop_workload.is_set():
                return
            app = self.wrng.choice(self.apps)
            record = {"app": app, "at": now(), "life": self.bgd.life}
            status, body = await asyncio.to_thread(
                api_call, self.sock, "POST", "/v1/app/task-requests",
                {"identifier": TASK_ID, "kind": "processing", "requiresNetworkConnectivity": False,
                 "requiresExternalPower": False}, 10, self.app_tokens[app])
            record.update(status=status, answered=now())
            if status is None or status >= 300:
                record["error"] = str(body)[:200]
            self.tasks.write(record)

    async def fetcher(self) -> None:
        while not self.stop_workload.is_set():
            await asyncio.sleep(self.wrng.uniform(1.5, 3.5))
            if not self.stop_workload.is_set():
                await self.simulate_fetch(self.wrng.choice(self.apps), "workload")

    async def submit_transfer(self, kind: str, file: str, app: str | None, why: str, attempts: int = 6) -> None:
        """Hands a transfer to bgd (retried while bgd is down) and records the id it got."""
        n = next(self.transfer_numbers)
        url = f"{self.origin}/{file}"
        record = {"n": n, "kind": kind, "file": file, "url": url, "app": app, "why": why,
                  "sha256": self.files[file]["sha256"], "size": self.files[file]["size"], "tries": []}
        if kind == "upload":
            # The app's own file in its container, PUT to the origin's WebDAV directory, where
            # nginx puts a body in place only once all of it arrived.
            source = self.state / "containers" / app / f"up-{n}.bin"
            await asyncio.to_thread(shutil.copyfile, self.run / "www" / file, source)
            url = f"{self.origin}/uploads/up-{n}.bin"
            record.update(url=url, source=str(source), uploaded_to=str(self.run / "uploads" / f"up-{n}.bin"))
        for attempt in range(attempts):
            at, life = now(), self.bgd.life
            if kind == "operator":
                destination = str(self.run / "downloads" / f"op{n}-{file}")
                record["destination"] = destination
                code, out, err = await self.bgctl("download", url, "--to", destination, "--no-wait", "--json", timeout=15)
                status, body = (201 if code == 0 else code), (out if code == 0 else err)
                try:
                    body = json.loads(body) if code == 0 else body.strip()[:300]
                except ValueError:
                    pass
            elif kind == "upload":
                status, body = await asyncio.to_thread(
                    api_call, self.sock, "POST", f"/v1/transfers?app={app}",
                    {"session": "fixture", "url": url, "kind": "upload", "uploadFile": record["source"],
                     "httpMethod": "PUT"}, 10)
            else:
                status, body = await asyncio.to_thread(
                    api_call, self.sock, "POST", f"/v1/transfers?app={app}", {"session": "fixture", "url": url}, 10)
            record["tries"].append({"at": at, "life": life, "status": status,
                                    "error": None if status == 201 else str(body)[:300]})
            if status == 201 and isinstance(body, dict) and "id" in body:
                record.update(id=body["id"], accepted_at=at, life=life)
                break
            if self.stop_workload.is_set():
                break
            await asyncio.sleep(1)
        self.transfers.write(record)

    def transfer_plan(self) -> list[tuple[str, str]]:
        """A few of each: (kind, file), spread over the campaign."""
        plan = [("operator", "8m.bin"), ("app", "1m.bin"), ("upload", "8m.bin"), ("operator", "40m.bin"),
                ("app", "8m.bin"), ("upload", "1m.bin"), ("app", "1m.bin"), ("operator", "1m.bin")]
        extra = max(0, self.args.faults // 10 - len(plan))
        plan += [self.wrng.choice(plan) for _ in range(extra)]
        return plan

    # --- faults ---------------------------------------------------------------------------

    def fixture_processes(self) -> list[dict]:
        """Live fixture app processes of this campaign: launched with our socket in BGD_SOCKET."""
        found = []
        exe = str(self.app_binary)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if not cmdline or os.path.realpath(cmdline[0].decode(errors="replace")) != os.path.realpath(exe):
                    continue
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
                env = dict(item.split(b"=", 1) for item in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0") if b"=" in item)
            except (OSError, ValueError, IndexError):
                continue
            if env.get(b"BGD_SOCKET", b"").decode() != self.sock:
                continue
            found.append({"pid": int(entry), "app": env.get(b"BGD_APP_ID", b"").decode(),
                          "run": env.get(b"BGD_RUN_ID", b"").decode() or None,
                          "reason": env.get(b"BGD_LAUNCH_REASON", b"").decode()})
        return found

    def kill_fixtures(self) -> list[int]:
        killed = []
        for process in self.fixture_processes():
            try:
                os.kill(process["pid"], signal.SIGKILL)
                killed.append(process["pid"])
            except ProcessLookupError:
                pass
        return killed

    async def fault_kill(self, record: dict) -> None:
        """D1: kill -9 at a random moment U(0.2 s, 3 s) into the life."""
        at = self.bgd.started_at + self.rng.uniform(0.2, 3.0)
        await asyncio.sleep(max(0.0, at - now()))
        record["life"] = self.bgd.life
        record["after_start_s"] = round(now() - self.bgd.started_at, 3)
        await self.bgd.kill(signal.SIGKILL, "fault: kill -9")
        record["restart_ready"] = await self.bgd.start()

    async def fault_failpoint(self, record: dict, name: str) -> None:
        """D2: restart under BGD_FAILPOINT=<name>:once, drive the path, wait for the self-kill."""
        record["failpoint"] = name
        await self.bgd.stop("fault: restart under a failpoint")
        record["ready"] = await self.bgd.start(mode="failpoint", failpoint=name)
        record["life"] = self.bgd.life
        # Work that passes the failpoint; pushes flow all the time.
        if name.startswith("transfer.afterUpload"):
            self.spawn(self.submit_transfer("upload", "8m.bin", self.rng.choice(self.apps), f"failpoint {name}", attempts=2))
        elif name.startswith("transfer."):
            self.spawn(self.submit_transfer("app", "1m.bin", self.rng.choice(self.apps), f"failpoint {name}", attempts=2))
        elif name.startswith(("run.", "event.")):
            for app in self.apps:
                self.spawn(self.simulate_fetch(app, f"failpoint {name}"))
        wait = 6 if self.args.quick else 10
        try:
            await asyncio.wait_for(asyncio.shield(self.bgd.exited.wait()), wait)
            record["hit"] = True
            record["returncode"] = self.bgd.record.get("returncode")
            log = (self.run / self.bgd.record["log"]).read_text(errors="replace")
            record["log_mentions_failpoint"] = name in log
        except asyncio.TimeoutError:
            # Not reached (or not known to this bgd): end the life ourselves.
            record["hit"] = False
            await self.bgd.kill(signal.SIGKILL, f"failpoint {name} not hit in {wait}s")
        record["restart_ready"] = await self.bgd.start()

    async def fault_sigstop(self, record: dict) -> None:
        """Pause (Jepsen's 'pause'): SIGSTOP for longer than a run's whole budget, then SIGCONT."""
        app = self.rng.choice(self.apps)
        await self.simulate_fetch(app, "sigstop")  # a run in flight whose deadline passes while stopped
        await asyncio.sleep(0.3)
        record["life"] = self.bgd.life
        self.bgd.signal(signal.SIGSTOP)
        record["stopped_at"] = now()
        await asyncio.sleep(SIGSTOP_S)
        if self.bgd.alive:
            self.bgd.signal(signal.SIGCONT)
        record["continued_at"] = now()
        await asyncio.sleep(2)
        record["alive_after"] = self.bgd.alive

    async def fault_app_kill(self, record: dict) -> None:
        """D8/D9: kill -9 an app process while it handles something (a fetch, a push, transfer events)."""
        app = self.rng.choice(self.apps)
        self.spawn(self.simulate_fetch(app, "app-kill"))
        deadline = now() + 3
        while now() < deadline:
            processes = self.fixture_processes()
            if processes:
                victim = self.wrng.choice(processes)  # runtime-dependent: keep it off the plan's RNG
                try:
                    os.kill(victim["pid"], signal.SIGKILL)
                    record.update(victim, killed=True)
                except ProcessLookupError:
                    continue
                break
            await asyncio.sleep(0.02)
        else:
            record["killed"] = False
        await asyncio.sleep(1)

    async def work_during(self, record: dict, why: str, key: str) -> None:
        """A fetch and an app transfer asked for while a storage fault lasts. A transfer accepted
        all the same is a promise like any other: the checker follows it."""
        app = self.rng.choice(self.apps)
        await self.simulate_fetch(app, why)
        status, body = await asyncio.to_thread(
            api_call, self.sock, "POST", f"/v1/transfers?app={app}", {"session": "fixture", "url": f"{self.origin}/1m.bin"}, 10)
        record[key] = {"status": status, "body": str(body)[:300]}
        if status == 201 and isinstance(body, dict):
            self.transfers.write({
                "n": next(self.transfer_numbers), "kind": "app", "file": "1m.bin", "url": f"{self.origin}/1m.bin",
                "app": app, "why": why, "sha256": self.files["1m.bin"]["sha256"],
                "size": self.files["1m.bin"]["size"], "id": body.get("id"), "accepted_at": now(), "life": self.bgd.life})

    async def fault_volume_full(self, record: dict) -> None:
        """D12: the state volume full for a few seconds while work arrives; bgd must refuse new
        work (503/507) and keep serving, then carry on once space is back."""
        filler = self.state / "filler"
        stats = os.statvfs(self.state)
        free = stats.f_bavail * stats.f_frsize
        record.update(life=self.bgd.life, free_before=free)
        try:
            self.fill(filler, free)
            stats = os.statvfs(self.state)
            record["free_during"] = stats.f_bavail * stats.f_frsize
            record["full_at"] = now()
            await self.work_during(record, "volume-full", "transfer_while_full")
            await asyncio.sleep(max(0.0, record["full_at"] + 4 - now()))
        finally:
            # Always: a volume left full would read as bgd failing to start from then on.
            filler.unlink(missing_ok=True)
        record["freed_at"] = now()
        await asyncio.sleep(1.5)
        record["alive_after"] = self.bgd.alive

    @staticmethod
    def fill(filler: Path, free: int) -> None:
        """Takes every free byte: fallocate, then unbuffered writes until ENOSPC (a buffered
        file would raise ENOSPC again on close, with the filler half made)."""
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, max(free, 4096))
            except OSError:
                pass
            os.lseek(fd, 0, os.SEEK_END)
            chunk = b"\0" * 65536
            while True:
                try:
                    os.write(fd, chunk)
                except OSError:
                    if len(chunk) == 1:
                        break
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)

    async def fault_fsync_eio(self, record: dict) -> None:
        """D5: fsync and fdatasync fail with EIO (the LD_PRELOAD shim, Chaos/fsync_eio.c) for a
        few seconds while work arrives: bgd must refuse what it could not make durable, trust no
        data whose sync failed, stay up, and carry on once syncs succeed again."""
        if self.bgd.record.get("mode") == "clock" or not self.bgd.alive:
            await self.bgd.ensure()
        record["life"] = self.bgd.life
        self.fsync_trigger.touch()
        record["failing_at"] = now()
        try:
            await self.work_during(record, "fsync-eio", "transfer_while_failing")
            await asyncio.sleep(max(0.0, record["failing_at"] + self.rng.uniform(2, 4) - now()))
        finally:
            self.fsync_trigger.unlink(missing_ok=True)
        record["healed_at"] = now()
        await asyncio.sleep(1.5)
        record["alive_after"] = self.bgd.alive

    async def fault_clock(self, record: dict) -> None:
        """D14: one life with the wall clock 2 days ahead (monotonic untouched), then back."""
        await self.bgd.stop("fault: restart with the clock 2 days ahead")
        record["ready"] = await self.bgd.start(mode="clock")
        record["life"] = self.bgd.life
        for app in self.apps:
            self.spawn(self.simulate_fetch(app, "clock"))
        await asyncio.sleep(self.rng.uniform(3, 5))
        await self.bgd.kill(signal.SIGKILL, "fault: end of the clock-jump life")
        record["restart_ready"] = await self.bgd.start()

    def spawn(self, coroutine) -> None:
        """A task kept referenced (asyncio holds only weak ones) and awaited before the settle."""
        task = asyncio.create_task(coroutine)
        self.side_tasks.add(task)
        task.add_done_callback(self.side_tasks.discard)

    def fault_plan(self) -> list[str]:
        """Every available kind once (shuffled), then a weighted draw; all from the seed."""
        kinds = [k for k in FAULT_WEIGHTS if k not in self.skipped and (not self.args.only or k in self.args.only)]
        first = kinds[:]
        self.rng.shuffle(first)
        rest = self.rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds], k=max(0, self.args.faults - len(first)))
        return (first + rest)[: self.args.faults]

    async def campaign(self) -> None:
        plan = self.fault_plan()
        failpoints = FAILPOINTS[:]
        self.rng.shuffle(failpoints)
        failpoint_cycle = itertools.cycle(failpoints)
        transfers = self.transfer_plan()
        transfer_at = {round(i * len(plan) / len(transfers)): t for i, t in enumerate(transfers)} if plan else {}
        workers = [asyncio.create_task(self.pusher(app)) for app in self.apps] + [
            asyncio.create_task(self.fetcher()), asyncio.create_task(self.tasker())]
        background: list[asyncio.Task] = []
        done = 0
        try:
            for index, kind in enumerate(plan):
                if now() > self.deadline:
                    print(f"nemesis: time limit reached after {done} of {len(plan)} faults", flush=True)
                    break
                await self.bgd.ensure()
                if index in transfer_at:
                    tkind, file = transfer_at[index]
                    app = self.wrng.choice(self.apps) if tkind in ("app", "upload") else None
                    background.append(asyncio.create_task(self.submit_transfer(tkind, file, app, "workload")))
                await asyncio.sleep(self.rng.uniform(0.3, 1.2))  # healthy time between faults
                record = {"n": index + 1, "kind": kind, "at": now()}
                try:
                    match kind:
                        case "kill": await self.fault_kill(record)
                        case "failpoint": await self.fault_failpoint(record, next(failpoint_cycle))
                        case "sigstop": await self.fault_sigstop(record)
                        case "app-kill": await self.fault_app_kill(record)
                        case "volume-full": await self.fault_volume_full(record)
                        case "clock": await self.fault_clock(record)
                        case "fsync-eio": await self.fault_fsync_eio(record)
                except Exception as error:  # a broken fault is recorded; the campaign goes on
                    record["error"] = f"{type(error).__name__}: {error}"
                record["end"] = now()
                self.faults.write(record)
                done += 1
                print(f"nemesis: fault {index + 1}/{len(plan)} {kind}"
                      f"{' ' + record['failpoint'] if 'failpoint' in record else ''}"
                      f"{' (hit)' if record.get('hit') else ''}{' ERROR ' + record['error'] if 'error' in record else ''}", flush=True)
        finally:
            self.meta["faults_done"] = done
            self.stop_workload.set()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if background or self.side_tasks:
                await asyncio.wait(background + list(self.side_tasks), timeout=15)

    # --- settle ---------------------------------------------------------------------------

    def store_counts(self) -> dict:
        """What is still unfinished, read from the store read-only (bgd keeps running)."""
        import sqlite3
        db = sqlite3.connect(f"file:{self.state / 'bgd.sqlite'}?mode=ro", uri=True, timeout=2)
        try:
            one = lambda sql: db.execute(sql).fetchone()[0]
            return {
                "queued_pushes": one("SELECT count(*) FROM push WHERE state IN ('queued', 'delivering')"),
                "open_transfers": one("SELECT count(*) FROM transfer WHERE state NOT IN ('completed', 'failed', 'cancelled')"),
                "runs_in_flight": one("SELECT count(*) FROM run WHERE outcome IS NULL"),
                "open_events": one("SELECT count(*) FROM event WHERE closedAt IS NULL"),
                "pending_tasks": one("SELECT count(*) FROM taskRequest"),
            }
        finally:
            db.close()

    async def settle(self) -> None:
        # Answers still on their way (a connection that lived through a SIGSTOP, say).
        if self.pending_pushes:
            await asyncio.wait(set(self.pending_pushes), timeout=15)
            for task in list(self.pending_pushes):
                task.cancel()
            await asyncio.gather(*self.pending_pushes, return_exceptions=True)
        for client in self.clients.values():
            client.pool.close()
        await self.bgd.stop("settle: clean restart")
        await self.bgd.ensure()
        timeout = 30 if self.args.quick else 60
        deadline = now() + timeout
        counts: dict = {}
        while now() < deadline:
            try:
                counts = await asyncio.to_thread(self.store_counts)
            except Exception as error:
                counts = {"error": str(error)}
            if counts and all(v == 0 for v in counts.values() if isinstance(v, int)) and "error" not in counts:
                break
            await asyncio.sleep(1)
        self.meta["settle"] = {"timeout_s": timeout, "took_s": round(timeout - (deadline - now()), 1), "left": counts}
        print(f"nemesis: settled: {counts}", flush=True)
        await self.bgd.stop("end of the campaign")
        # Apps have no reason to outlive bgd; any that do are ended (and counted).
        await asyncio.sleep(0.5)
        self.meta["lingering_apps"] = self.fixture_processes()
        self.kill_fixtures()

    async def main(self) -> None:
        started = now()
        try:
            await self.setup()
            await self.campaign()
            await self.settle()
        finally:
            # Whatever happened: no bgd, no app and no mount outlive the campaign.
            if self.bgd.alive:
                await self.bgd.kill(signal.SIGKILL, "harness cleanup")
            self.kill_fixtures()
            self.meta["duration_s"] = round(now() - started, 1)
            self.write_meta()
            self.unmount_state()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--bin", required=True, help="where bgd and bgctl are")
    parser.add_argument("--app", help="the fixture app (default: BIN/bgd-fixture-app, Tests/Fixtures/FixtureApp's product)")
    parser.add_argument("--origin", required=True, help="the nginx serving www/ (run.sh starts it)")
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fsync-shim", default=None, help="fsync_eio.so (Chaos/fsync_eio.c): the fsync-eio fault; skipped without")
    parser.add_argument("--push-rate", type=float, default=3.0, help="pushes a second, per app")
    parser.add_argument("--only", type=lambda text: text.split(","), default=None,
                        help=f"only these fault kinds, comma-separated: {', '.join(FAULT_WEIGHTS)}")
    parser.add_argument("--durability", default="full", choices=["full", "normal"])
    parser.add_argument("--tmpfs-mib", type=int, default=None, help="the state volume (default 64, more for long campaigns)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds for the faults (default: 12 per fault + 60)")
    args = parser.parse_args(argv)
    if args.tmpfs_mib is None:
        args.tmpfs_mib = max(64, args.faults // 4)  # the push table grows with the campaign
    if args.time_limit is None:
        args.time_limit = 60 + 12 * args.faults
    return args


def main() -> int:
    args = parse_args()
    logging.basicConfig(filename=str(Path(args.run_dir) / "aioapns.log"), level=logging.WARNING)
    campaign = Campaign(args)
    loop = asyncio.new_event_loop()
    task = loop.create_task(campaign.main())
    # SIGTERM/SIGINT (run.sh's trap, timeout): unwind through main()'s cleanup.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        print("nemesis: interrupted; cleaned up", file=sys.stderr)
        return 130
    except Exception as error:
        print(f"nemesis: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
