"""The Jepsen-style checker for a chaos run: compares what the harness sent and was promised
(pushes answered 200, transfers accepted, fetch runs started) with what the apps saw (their
fixture.log files) and what the store says became of each, and counts every broken promise.

    python3 Chaos/checker.py RUN_DIR        prints the table, writes RUN_DIR/result.json
                                            exit 0: every must-be-0 column is 0; 1: one is not; 2: no run there

Reads only the run directory: nemesis.py's journals, bgd's SQLite file (read-only) and the
apps' fixture.log. Stdlib only; importable (`check(run_dir) -> dict`, `render(result) -> str`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

# The columns that must be 0 for a campaign to pass, in the order the table shows them.
MUST_BE_ZERO = [
    "pushes_lost",
    "pushes_duplicated",
    "wrong_app",
    "out_of_order",
    "transfers_wrong_hash",
    "transfer_events_lost",
    "transfer_files_left",
    "fetch_runs_duplicated",
    "tasks_lost",
    "integrity_not_ok",
    "bgd_crashes_not_injected",
    "bgd_stops_hung",
]


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line:
            try:
                records.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a kill of the harness itself
    return records


def sha256_file(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


class Store:
    """bgd's SQLite file, read-only. A WAL database needs its -shm to be readable; if a read-only
    open fails (no -shm and no right to make one), a private copy is read instead."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp: str | None = None
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            self.tmp = tempfile.mkdtemp(prefix="chaos-check-")
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{path}{suffix}").exists():
                    shutil.copy(f"{path}{suffix}", f"{self.tmp}/bgd.sqlite{suffix}")
            self.db = sqlite3.connect(f"{self.tmp}/bgd.sqlite")
        self.db.row_factory = sqlite3.Row

    def rows(self, sql: str, *args) -> list[sqlite3.Row]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error:
            return []

    def integrity(self) -> str:
        try:
            return "; ".join(str(row[0]) for row in self.db.execute("PRAGMA integrity_check").fetchall())
        except sqlite3.Error as error:
            return f"cannot check: {error}"

    def close(self) -> None:
        self.db.close()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _seconds(stamp: str | None) -> float | None:
    """GRDB's 'YYYY-MM-DD HH:MM:SS.SSS' as seconds (for differences only)."""
    from datetime import datetime
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None


LINE = re.compile(r"^(fetch|push|finished|completed)\s+(\S+)(?:\s+(.*))?$")


def read_app_log(path: Path) -> list[tuple[str, str, str]]:
    """fixture.log as (kind, id, rest): `fetch <run> pid <pid>`, `push <content-id>`,
    `finished <transfer> <sha256>`, `completed <transfer> <ok|code>`; other lines are skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        match = LINE.match(line.strip())
        if match:
            out.append((match.group(1), match.group(2), match.group(3) or ""))
    return out


def check(run_dir: str | Path) -> dict:
    run = Path(run_dir).resolve()
    meta = json.loads((run / "meta.json").read_text())
    pushes = read_jsonl(run / "pushes.jsonl")
    fetches = read_jsonl(run / "fetches.jsonl")
    transfers = read_jsonl(run / "transfers.jsonl")
    faults = read_jsonl(run / "faults.jsonl")
    lives = read_jsonl(run / "lives.jsonl")
    tasks = read_jsonl(run / "tasks.jsonl")
    apps = meta["apps"]
    state = Path(meta.get("state_dir", run / "state"))
    containers = Path(meta.get("containers_dir", state / "containers"))
    store = Store(state / "bgd.sqlite")
    r: dict = {"run": str(run), "seed": meta.get("seed"), "notes": []}

    # --- what each app saw -------------------------------------------------------------------
    logs = {app: read_app_log(containers / app / "fixture.log") for app in apps}
    pushes_seen: dict[str, Counter] = {app: Counter() for app in apps}  # content-id → times, per app
    fetch_lines: dict[str, Counter] = {app: Counter() for app in apps}
    for app, lines in logs.items():
        for kind, ident, _ in lines:
            if kind == "push":
                pushes_seen[app][ident] += 1
            elif kind == "fetch":
                fetch_lines[app][ident] += 1

    # --- faults and lives ----------------------------------------------------------------------
    r["faults"] = dict(Counter(f["kind"] for f in faults))
    r["faults_total"] = len(faults)
    fp = [f for f in faults if f["kind"] == "failpoint"]
    r["failpoints_hit"] = sorted({f["failpoint"] for f in fp if f.get("hit")})
    r["failpoints_not_hit"] = sorted({f["failpoint"] for f in fp if not f.get("hit")} - set(r["failpoints_hit"]))
    r["fault_errors"] = [f"{f['n']} {f['kind']}: {f['error']}" for f in faults if f.get("error")]
    r["skipped_fault_kinds"] = meta.get("skipped", {})
    killed_app_pids = {f["pid"] for f in faults if f["kind"] == "app-kill" and f.get("killed")}

    crashes, hung = [], []
    for life in lives:
        log_path = run / life.get("log", "")
        text = log_path.read_text(errors="replace") if log_path.is_file() else ""
        fatal = [line.strip() for line in text.splitlines() if "Fatal error" in line]
        if life.get("hung_on_sigterm"):
            hung.append(life["life"])
        if not life.get("injected", True) or (fatal and life.get("ended_by") != "failpoint"):
            crashes.append({"life": life["life"], "mode": life.get("mode"), "returncode": life.get("returncode"),
                            "we_did": life.get("ended_by"), "fatal": fatal[:3], "log": life.get("log")})
    r["bgd_lives"] = len(lives)
    r["bgd_crashes_not_injected"] = len(crashes)
    r["bgd_crash_details"] = crashes
    r["bgd_stops_hung"] = len(hung)
    r["bgd_stops_hung_lives"] = hung

    # --- pushes ---------------------------------------------------------------------------------
    # By apns-id, the push's name (unique per app): a replaced push keeps its row but not its
    # payload, so the content-id inside the payload no longer names it.
    # The content-id still tells a push stored twice under two apns-ids (where it has a payload).
    rows_by_apns_id: dict[str, list[sqlite3.Row]] = defaultdict(list)
    rows_by_cid: dict[int, list[sqlite3.Row]] = defaultdict(list)
    for row in store.rows("SELECT id, appId, apnsId, state, reasonCode, reason, payload FROM push"):
        rows_by_apns_id[row["apnsId"].lower()].append(row)
        try:
            payload = row["payload"]
            cid = json.loads(payload.decode() if isinstance(payload, bytes) else payload).get("content-id")
        except (ValueError, AttributeError):
            cid = None
        if isinstance(cid, int):
            rows_by_cid[cid].append(row)
    runs = {row["id"]: row for row in store.rows("SELECT id, appId, kind, outcome, pid, detail FROM run")}
    # Which runs carried each push (its event names the apns-id): more than one is a redelivery.
    runs_by_apns: dict[str, list[int]] = defaultdict(list)
    for row in store.rows("SELECT runId, body FROM event WHERE kind = 'remoteNotification' AND runId IS NOT NULL"):
        match = re.search(r'"apnsID"\s*:\s*"([^"]+)"', row["body"] or "")
        if match:
            runs_by_apns[match.group(1).lower()].append(row["runId"])

    sent = [p for p in pushes if p.get("outcome") != "not-sent"]
    r["pushes_not_sent"] = len(pushes) - len(sent)
    r["pushes_sent"] = len(sent)
    statuses = Counter()
    for p in sent:
        if p.get("outcome") == "answered":
            statuses[f"{p['status']} {p.get('reason') or ''}".strip()] += 1
        else:
            statuses[f"no answer ({p.get('outcome')})"] += 1
    r["push_answers"] = dict(statuses.most_common())
    ok = [p for p in sent if p.get("outcome") == "answered" and p.get("status") == 200]
    r["pushes_answered_200"] = len(ok)

    fates = Counter()
    lost_causes = Counter()
    lost_examples = []
    for p in ok:
        cid, app = p["cid"], p["app"]
        if pushes_seen[app][str(cid)]:
            fates["seen by the app"] += 1
            continue
        rows = [row for row in rows_by_apns_id.get(p["apns_id"].lower(), []) if row["appId"] == app]
        row = rows[-1] if rows else None
        if row is not None and row["state"] in ("replaced", "dropped") and row["reasonCode"]:
            fates[f"{row['state']} ({row['reasonCode']})"] += 1
            continue
        if row is None:
            cause = "200 but not in the store"
        elif row["state"] == "queued":
            cause = "still queued"
        elif row["state"] == "delivered":
            match = re.search(r"in run (\d+)", row["reason"] or "")
            run_row = runs.get(int(match.group(1))) if match else None
            if run_row is None:
                cause = "delivered to an unknown run"
            elif run_row["outcome"] == "interrupted":
                cause = "delivered, run cut by a bgd restart"
            elif run_row["outcome"] == "crashed" and run_row["pid"] in killed_app_pids:
                cause = "delivered, app killed by the nemesis"
            elif run_row["outcome"] in ("newData", "noData", "failed"):
                cause = f"delivered, run answered {run_row['outcome']}, never logged"
            else:
                cause = f"delivered, run ended {run_row['outcome']}"
        else:
            cause = f"state {row['state']} without a reason code"
        lost_causes[cause] += 1
        if len(lost_examples) < 10:
            lost_examples.append({"cid": cid, "app": app, "apns_id": p["apns_id"], "life": p.get("life"), "cause": cause})
    r["push_fates"] = dict(fates.most_common())
    r["pushes_lost"] = sum(lost_causes.values())
    r["pushes_still_queued"] = lost_causes.get("still queued", 0)
    r["push_lost_causes"] = dict(lost_causes.most_common())
    r["push_lost_examples"] = lost_examples

    # Seen without a 200: the gateway committed but the answer never arrived. Not a loss; noted.
    answered_200 = {p["cid"] for p in ok}
    sent_cids = {p["cid"]: p for p in pushes}
    r["pushes_seen_without_200"] = sum(
        1 for app in apps for cid in pushes_seen[app] if cid.lstrip("-").isdigit() and int(cid) not in answered_200
        and int(cid) in sent_cids)

    total_seen = Counter()
    for app in apps:
        total_seen.update(pushes_seen[app])
    # Why each duplicate happened: redelivered in a second run after the first run's process
    # died (at-least-once across an app crash), or handled twice within one run (two processes
    # of the app fed the same event).
    duplicate_causes = Counter()
    duplicate_examples = []
    for cid, n in total_seen.items():
        if n < 2:
            continue
        sent_to = sent_cids.get(int(cid)) if cid.lstrip("-").isdigit() else None
        carried = sorted(set(runs_by_apns.get((sent_to or {}).get("apns_id", "").lower(), [])))
        if len(carried) > 1:
            first = runs.get(carried[0])
            killed = first is not None and first["pid"] in killed_app_pids
            cause = ("redelivered: nemesis killed the app mid-handler" if killed
                     else f"redelivered: first run ended {first['outcome'] if first else '?'}")
        elif len(carried) == 1:
            cause = "one run, handled twice (two app processes?)"
        else:
            cause = "no run carried it in the store"
        duplicate_causes[cause] += 1
        if len(duplicate_examples) < 10:
            duplicate_examples.append({"cid": cid, "times": n, "apps": [a for a in apps if pushes_seen[a][cid]], "runs": carried, "cause": cause})
    r["pushes_duplicated"] = sum(duplicate_causes.values())
    r["push_duplicate_causes"] = dict(duplicate_causes.most_common())
    r["push_duplicate_examples"] = duplicate_examples
    r["pushes_stored_twice"] = sum(1 for rows in rows_by_cid.values() if len(rows) > 1)

    wrong = []
    unexpected = []
    for app in apps:
        for cid in pushes_seen[app]:
            sent_to = sent_cids.get(int(cid)) if cid.lstrip("-").isdigit() else None
            if sent_to is None:
                unexpected.append((app, cid))
            elif sent_to["app"] != app:
                wrong.append({"what": "push", "id": cid, "sent_to": sent_to["app"], "seen_by": app})

    # --- fetch runs -----------------------------------------------------------------------------
    for app in apps:
        for run_id in fetch_lines[app]:
            row = runs.get(int(run_id)) if run_id.isdigit() else None
            if row is not None and row["appId"] != app:
                wrong.append({"what": "fetch run", "id": run_id, "run_of": row["appId"], "seen_by": app})
    r["fetch_requests"] = len(fetches)
    r["fetch_runs_started"] = sum(1 for f in fetches if f.get("run") is not None)
    r["fetch_errors"] = dict(Counter(re.sub(r"\d+", "N", (f.get("error") or "")[:90]) for f in fetches if f.get("run") is None).most_common(6))
    r["fetch_runs_seen"] = sum(len(c) for c in fetch_lines.values())
    # `fetch ?`: the fixture logs the run it was launched for (BGD_RUN) at its first fetch; a fetch
    # bgd gives a process already running (one launched for url-session events, which has no run,
    # or one still lingering after its own run) is logged with `?` — distinct runs, not a run seen
    # twice. Counted apart.
    r["fetch_runs_in_event_launches"] = sum(fetch_lines[app]["?"] for app in apps)

    # BGTaskScheduler requests, as the apps submitted them. A request carries no id of its own
    # (a newer submit replaces a pending one), so the promise checked is: every request accepted
    # is carried out by a task run that starts after it, or is still pending at the end.
    from datetime import datetime, timezone

    def utc_seconds(stamp):
        try:
            return datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp() if stamp else None
        except ValueError:
            return None

    accepted = [t for t in tasks if t.get("status") == 201]
    r["task_requests_sent"] = len(tasks)
    r["task_requests_accepted"] = len(accepted)
    task_starts = defaultdict(list)
    for row in store.rows("SELECT appId, startedAt, outcome FROM run WHERE kind = 'task'"):
        started = utc_seconds(row["startedAt"])
        if started is not None:
            task_starts[row["appId"]].append((started, row["outcome"]))
    r["task_runs"] = sum(len(v) for v in task_starts.values())
    r["task_runs_answered"] = sum(1 for v in task_starts.values() for _, outcome in v if outcome in ("newData", "noData", "failed"))
    pending = Counter(row["appId"] for row in store.rows("SELECT appId FROM taskRequest"))
    r["task_requests_pending_at_end"] = sum(pending.values())
    lost = []
    for t in accepted:
        # A run started after the request was sent (a second of slack for the two clocks) took it.
        if any(started >= t["at"] - 1 for started, _ in task_starts.get(t["app"], [])) or pending[t["app"]]:
            continue
        lost.append({"app": t["app"], "at": t["at"], "life": t.get("life")})
    r["tasks_lost"] = len(lost)
    r["tasks_lost_details"] = lost[:10]
    r["task_handler_runs_seen"] = sum(
        1 for app in apps for line in ((containers / app / "fixture.log").read_text(errors="replace").splitlines()
                                       if (containers / app / "fixture.log").exists() else [])
        if line.startswith("task "))
    r["fetch_runs_duplicated"] = sum(1 for app in apps for run, n in fetch_lines[app].items() if n > 1 and run != "?")
    # Runs bgd started on its own. The fetch floor is 15 minutes, so in a campaign of minutes
    # each is a catch-up; two for one app within a second is a burst (D14: at most one catch-up).
    own = store.rows("SELECT id, appId, startedAt, reasons FROM run WHERE kind = 'fetch' AND trigger = 'scheduled' ORDER BY id")
    r["fetch_runs_scheduled"] = len(own)
    r["fetch_scheduled_reasons"] = dict(Counter(
        (re.search(r'"code"\s*:\s*"([^"]+)"', row["reasons"] or "") or [None, "?"])[1] for row in own).most_common())
    bursts, last = Counter(), {}
    for row in own:
        started = _seconds(row["startedAt"])
        if row["appId"] in last and started is not None and last[row["appId"]] is not None and 0 <= started - last[row["appId"]] < 1:
            bursts[row["appId"]] += 1
        last[row["appId"]] = started
    r["fetch_burst_runs"] = sum(bursts.values())
    r["fetch_burst_by_app"] = dict(bursts)
    r["fetch_outcomes"] = dict(Counter(row["outcome"] or "in flight" for row in runs.values() if row["kind"] == "fetch").most_common())
    r["push_run_outcomes"] = dict(Counter(row["outcome"] or "in flight" for row in runs.values() if row["kind"] == "push").most_common())

    # --- transfers ------------------------------------------------------------------------------
    trows = {row["id"]: row for row in store.rows("SELECT id, appId, state, error, destination, restarts, attempts FROM transfer")}
    events: dict[str, dict[str, list[tuple[str, str]]]] = {app: defaultdict(list) for app in apps}
    for app, lines in logs.items():
        for kind, ident, rest in lines:
            if kind in ("finished", "completed"):
                events[app][ident].append((kind, rest.strip()))
                row = trows.get(int(ident)) if ident.isdigit() else None
                if row is not None and row["appId"] != app:
                    wrong.append({"what": "transfer event", "id": ident, "transfer_of": row["appId"], "seen_by": app})
    r["wrong_app"] = len(wrong) + len(unexpected)
    r["wrong_app_details"] = (wrong + [{"what": "push never sent", "id": cid, "seen_by": app} for app, cid in unexpected])[:10]

    # Order, per transfer in its app's log: no `completed ok` before a `finished`, no `finished`
    # after the last `completed` (events are redelivered after a crash, so repeats are allowed;
    # a whole redelivered pair reads finished, completed, finished, completed).
    disorder = []
    uploads = {str(t["id"]) for t in transfers if t.get("kind") == "upload" and t.get("id") is not None}
    for app in apps:
        for ident, seq in events[app].items():
            kinds = [k for k, _ in seq]
            if ident in uploads:
                # An upload hands no file over: `completed` alone, never a `finished`.
                if "finished" in kinds:
                    disorder.append({"app": app, "transfer": ident, "events": " ".join(kinds)})
                continue
            first_finished = kinds.index("finished") if "finished" in kinds else None
            ok_before = any(k == "completed" and v == "ok" and (first_finished is None or i < first_finished)
                            for i, (k, v) in enumerate(seq))
            last_completed = max((i for i, k in enumerate(kinds) if k == "completed"), default=None)
            finished_after = last_completed is not None and any(k == "finished" for k in kinds[last_completed + 1:])
            if ok_before or finished_after:
                disorder.append({"app": app, "transfer": ident, "events": " ".join(kinds)})
    r["out_of_order"] = len(disorder)
    r["out_of_order_details"] = disorder[:10]

    accepted = [t for t in transfers if t.get("id") is not None]
    r["transfers_requested"] = len(transfers)
    r["transfers_accepted"] = len(accepted)
    r["transfers_refused"] = [f"{t['kind']} {t['file']}: {(t.get('tries') or [{}])[-1].get('error')}" for t in transfers if t.get("id") is None]
    right, wrong_hash, unfinished, failed, events_lost = [], [], [], [], []
    redelivered_missing = 0
    for t in accepted:
        row = trows.get(t["id"])
        label = f"#{t['id']} {t['kind']} {t['file']}" + (f" → {t['app']}" if t.get("app") else "")
        if row is None:
            events_lost.append(f"{label}: accepted (201) but not in the store")
            continue
        if row["state"] not in ("completed", "failed", "cancelled"):
            unfinished.append(f"{label}: {row['state']}")
            continue
        hashes: list[str] = []
        if t["kind"] in ("app", "upload"):
            # Every ended transfer owes its app a terminal event; a completed download also the file.
            seq = events[t["app"]].get(str(t["id"]), [])
            hashes = [v for k, v in seq if k == "finished"]
            owed = [("didCompleteWithError", "completed")]
            if t["kind"] == "app":
                owed.insert(0, ("didFinishDownloadingTo", "finished"))
            missing = [name for name, kind in owed
                       if (kind == "completed" or row["state"] == "completed") and not any(k == kind for k, _ in seq)]
            if missing:
                events_lost.append(f"{label}: {row['state']} but the app never got {' nor '.join(missing)}")
                continue
            if t["kind"] == "upload" and row["state"] == "completed" and ("completed", "ok") not in seq:
                events_lost.append(f"{label}: completed but the app was told {[v for k, v in seq if k == 'completed']}")
                continue
        if row["state"] != "completed":
            failed.append(f"{label}: {row['state']} {row['error'] or ''}".strip())
            continue
        if t["kind"] == "operator":
            got = sha256_file(Path(t["destination"]))
            (right if got == t["sha256"] else wrong_hash).append(f"{label}: {got or 'no file'}")
        elif t["kind"] == "upload":
            # What the origin holds: nginx puts a PUT body in place only whole.
            got = sha256_file(Path(t["uploaded_to"]))
            (right if got == t["sha256"] else wrong_hash).append(f"{label}: the origin has {got or 'no file'}")
        else:
            bad = [h for h in hashes if h not in (t["sha256"], "missing")]
            redelivered_missing += sum(1 for h in hashes if h == "missing")
            if bad or t["sha256"] not in hashes:
                wrong_hash.append(f"{label}: app saw {', '.join(sorted(set(hashes)))}")
            else:
                kept = sha256_file(containers / t["app"] / f"kept-{t['id']}")
                if kept is not None and kept != t["sha256"]:
                    wrong_hash.append(f"{label}: the app's kept file is {kept}")
                else:
                    right.append(label)
    r["transfers_right_hash"] = len(right)
    r["transfers_wrong_hash"] = len(wrong_hash)
    r["transfers_wrong_hash_details"] = wrong_hash
    r["transfers_unfinished"] = len(unfinished)
    r["transfers_unfinished_details"] = unfinished
    r["transfers_failed"] = len(failed)
    r["transfers_failed_details"] = failed
    r["transfer_events_lost"] = len(events_lost)
    r["transfer_events_lost_details"] = events_lost
    r["transfer_finished_redelivered_without_file"] = redelivered_missing
    # What bgd keeps for a transfer (its upload's copy, a download's partial file) goes when the
    # transfer ends, and a copy a crash cut short goes at the next start: after the clean stop
    # none of either is left.
    left = []
    ended = {ident for ident, row in trows.items() if row["state"] in ("completed", "failed", "cancelled")}
    for directory in [state / "transfers"] + [containers / app / "transfers" for app in apps]:
        for entry in sorted(directory.iterdir()) if directory.is_dir() else []:
            name = entry.name
            stem, _, suffix = name.rpartition(".")
            if name.startswith(".copying-"):
                left.append(f"{entry}: an upload's copy with no transfer")
            elif suffix in ("upload", "partial") and stem.isdigit() and (int(stem) in ended or int(stem) not in trows):
                left.append(f"{entry}: transfer {stem} {'ended' if int(stem) in ended else 'is not in the store'}")
    r["transfer_files_left"] = len(left)
    r["transfer_files_left_details"] = left
    r["transfer_restarts"] = sum(row["restarts"] or 0 for row in trows.values())

    # --- the volume-full windows: what bgd answered while it had no space ------------------------
    windows = [(f["full_at"], f["freed_at"]) for f in faults if f["kind"] == "volume-full" and "freed_at" in f]
    during = Counter()
    for p in pushes:
        if any(a <= p["sent_at"] <= b for a, b in windows):
            during[f"{p['status']} {p.get('reason') or ''}".strip() if p.get("outcome") == "answered" else p.get("outcome")] += 1
    r["answers_while_volume_full"] = dict(during.most_common())
    r["fetch_while_volume_full"] = [f.get("error") or f"run {f.get('run')}" for f in fetches if f.get("why") == "volume-full"]

    # --- the store itself ------------------------------------------------------------------------
    r["integrity_check"] = store.integrity()
    r["integrity_not_ok"] = 0 if r["integrity_check"] == "ok" else 1
    store.close()

    settle = meta.get("settle", {})
    r["settle"] = settle
    r["lingering_apps"] = len(meta.get("lingering_apps") or [])
    r["duration_s"] = meta.get("duration_s")
    r["faults_requested"] = meta.get("faults_requested")
    r["failures"] = {k: r[k] for k in MUST_BE_ZERO if r[k]}
    r["passed"] = not r["failures"]
    return r


def render(r: dict) -> str:
    out = []
    mark = lambda key: ("  ✗ must be 0" if r[key] else "  ✓") if key in MUST_BE_ZERO else ""

    def row(label: str, value, key: str | None = None, indent: int = 0) -> None:
        width = max(54 - 2 * indent, len(label) + 1)  # a long label pushes its value, not off the line
        out.append(f"{'  ' * indent}{label:<{width}}{value!s:>8}{mark(key) if key else ''}")

    faults = ", ".join(f"{k} ×{v}" for k, v in sorted(r["faults"].items()))
    out.append(f"chaos run {Path(r['run']).name}: {r['faults_total']} of {r['faults_requested']} faults ({faults}); "
               f"{r['bgd_lives']} bgd lives; {r['duration_s']} s")
    if r["failpoints_hit"] or r["failpoints_not_hit"]:
        out.append(f"failpoints hit: {', '.join(r['failpoints_hit']) or 'none'}; "
                   f"never hit: {', '.join(r['failpoints_not_hit']) or 'none'}")
    for kind, why in r["skipped_fault_kinds"].items():
        out.append(f"skipped fault kind {kind}: {why}")
    out.append("-" * 78)
    row("pushes sent", r["pushes_sent"])
    row("not sent (gateway unreachable)", r["pushes_not_sent"], indent=1)
    for answer, n in r["push_answers"].items():
        row(f"answered {answer}" if answer[:1].isdigit() else answer, n, indent=1)
    for fate, n in r["push_fates"].items():
        row(f"200 → {fate}", n, indent=1)
    row("LOST (200, never seen, no fate with a reason)", r["pushes_lost"], "pushes_lost")
    for cause, n in r["push_lost_causes"].items():
        row(cause, n, indent=1)
    row("duplicated (a content-id the apps saw twice)", r["pushes_duplicated"], "pushes_duplicated")
    for cause, n in r["push_duplicate_causes"].items():
        row(cause, n, indent=1)
    row("wrong app (seen by an app it was not for)", r["wrong_app"], "wrong_app")
    row("out of order (finished → completed; none for an upload)", r["out_of_order"], "out_of_order")
    row("transfers accepted", f"{r['transfers_accepted']}/{r['transfers_requested']}")
    row("right SHA-256", r["transfers_right_hash"], indent=1)
    row("failed or cancelled (terminal, with an error)", r["transfers_failed"], indent=1)
    row("not finished at the end", r["transfers_unfinished"], indent=1)
    row("wrong SHA-256", r["transfers_wrong_hash"], "transfers_wrong_hash")
    row("transfer events lost (app never told)", r["transfer_events_lost"], "transfer_events_lost")
    row("transfer files left behind (copies, partials)", r["transfer_files_left"], "transfer_files_left")
    row("fetch runs started / seen by the apps", f"{r['fetch_runs_started']}/{r['fetch_runs_seen']}")
    row("fetch runs seen twice", r["fetch_runs_duplicated"], "fetch_runs_duplicated")
    row("fetch runs given to a process already running", r["fetch_runs_in_event_launches"], indent=1)
    row("task requests sent / accepted", f"{r['task_requests_sent']}/{r['task_requests_accepted']}")
    row("task runs / answered / handlers seen by the apps", f"{r['task_runs']}/{r['task_runs_answered']}/{r['task_handler_runs_seen']}", indent=1)
    row("task requests still pending at the end", r["task_requests_pending_at_end"], indent=1)
    row("tasks lost (accepted, never run, not pending)", r["tasks_lost"], "tasks_lost")
    row("fetch runs bgd started itself / of them < 1 s apart", f"{r['fetch_runs_scheduled']}/{r['fetch_burst_runs']}")
    row(f"PRAGMA integrity_check: {r['integrity_check'][:30]}", r["integrity_not_ok"], "integrity_not_ok")
    row("bgd crashes not injected", r["bgd_crashes_not_injected"], "bgd_crashes_not_injected")
    row("bgd stops hung (SIGTERM not honoured in 15 s)", r["bgd_stops_hung"], "bgd_stops_hung")
    out.append("-" * 78)
    notes = []
    if r["faults_total"] < (r["faults_requested"] or 0):
        notes.append(f"only {r['faults_total']} of {r['faults_requested']} faults ran (time limit, or the harness stopped: see nemesis' output)")
    if r["pushes_seen_without_200"]:
        notes.append(f"{r['pushes_seen_without_200']} pushes reached an app though their answer was not a 200 (committed, answer lost)")
    if r["pushes_stored_twice"]:
        notes.append(f"{r['pushes_stored_twice']} content-ids are stored twice (each was sent once)")
    if r["answers_while_volume_full"]:
        notes.append("while the state volume was full: " + ", ".join(f"{k} ×{v}" for k, v in r["answers_while_volume_full"].items()))
    if r["fetch_while_volume_full"]:
        notes.append("fetch while full: " + "; ".join(str(x)[:100] for x in r["fetch_while_volume_full"]))
    if r["fetch_burst_runs"]:
        notes.append(f"burst of scheduled fetches (D14 allows one catch-up): {r['fetch_burst_by_app']} runs < 1 s after the app's previous "
                     f"one; reasons of bgd's own runs: {r['fetch_scheduled_reasons']}")
    if r["transfer_finished_redelivered_without_file"]:
        notes.append(f"{r['transfer_finished_redelivered_without_file']} didFinishDownloadingTo redelivered after the file was moved (sha 'missing')")
    if r["settle"].get("left") and any(v for v in r["settle"]["left"].values() if isinstance(v, int)):
        notes.append(f"not settled after {r['settle'].get('timeout_s')} s: {r['settle']['left']}")
    if r["lingering_apps"]:
        notes.append(f"{r['lingering_apps']} app processes outlived bgd's clean stop (ended by the harness)")
    for detail in r["bgd_crash_details"]:
        notes.append(f"uninjected end of bgd life {detail['life']} ({detail['mode']}): status {detail['returncode']}, "
                     f"we did {detail['we_did']}; {'; '.join(detail['fatal']) or 'see ' + str(detail['log'])}")
    for key in ("transfers_wrong_hash_details", "transfer_events_lost_details", "transfers_unfinished_details", "transfers_failed_details",
                "transfer_files_left_details"):
        for detail in r[key][:5]:
            notes.append(f"{key.replace('_details', '').replace('_', ' ')}: {detail}")
    for detail in r["out_of_order_details"][:5] + r["wrong_app_details"][:5] + r["push_duplicate_examples"][:5]:
        notes.append(json.dumps(detail))
    for refused in r["transfers_refused"][:5]:
        notes.append(f"transfer never accepted: {refused}")
    for error in r["fault_errors"][:5]:
        notes.append(f"fault error: {error}")
    out.extend(f"note: {n}" for n in notes)
    out.append("PASS" if r["passed"] else "FAIL: " + ", ".join(f"{k}={v}" for k, v in r["failures"].items()))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not (Path(argv[1]) / "meta.json").exists():
        print("usage: checker.py RUN_DIR (a directory nemesis.py wrote, with meta.json)", file=sys.stderr)
        return 2
    result = check(argv[1])
    (Path(argv[1]) / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    print(render(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
