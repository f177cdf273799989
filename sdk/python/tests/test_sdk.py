"""The SDK against a real appliance: every call, timeouts, streaming,
background processes and every typed exception."""

import os
import time
from typing import List

import pytest

import airlock
from airlock import policy

DENIED_HOST = "bad.pkg.example.test"  # deny.hosts[0] of the e2e policy


def test_run_echo(sbx: airlock.Sandbox) -> None:
    r = sbx.commands.run("echo hi")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hi\n", "")
    assert r.exec_id and r.ok
    assert sbx.refresh()["id"] == sbx.id and sbx.info["state"] == "running"


def test_exit_code_stderr_argv(sbx: airlock.Sandbox) -> None:
    r = sbx.commands.run("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok
    r = sbx.commands.run(["printf", "%s|", "a b", "c"])
    assert r.stdout == "a b|c|"


def test_cwd_env_stdin(sbx: airlock.Sandbox) -> None:
    r = sbx.commands.run("pwd; echo $FOO; cat", cwd="/tmp", env={"FOO": "bar"}, stdin="from stdin")
    assert r.stdout == "/tmp\nbar\nfrom stdin"


def test_streaming_callbacks(sbx: airlock.Sandbox) -> None:
    got: List[tuple] = []
    errs: List[str] = []
    start = time.monotonic()
    r = sbx.commands.run("for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.4; done",
                         on_stdout=lambda s: got.append((time.monotonic() - start, s)),
                         on_stderr=errs.append)
    total = time.monotonic() - start
    assert "".join(s for _, s in got) == "1\n2\n3\n" == r.stdout
    assert "".join(errs) == "e1\ne2\ne3\n" == r.stderr
    # The first line came while the command was still running, not at the end.
    assert got[0][0] < total - 0.6, (got, total)


def test_command_timeout(sbx: airlock.Sandbox) -> None:
    start = time.monotonic()
    with pytest.raises(airlock.Timeout) as ei:
        sbx.commands.run("echo started; sleep 60", timeout=1.5)
    assert time.monotonic() - start < 20
    e = ei.value
    assert e.code == "timeout" and e.request_id.startswith("py-")
    assert e.result is not None and e.result.timed_out and e.result.stdout == "started\n" and e.result.exec_id


def test_background_wait(sbx: airlock.Sandbox) -> None:
    start = time.monotonic()
    h = sbx.commands.run("sleep 1.5; echo done", background=True)
    assert isinstance(h, airlock.CommandHandle) and h.exec_id
    assert time.monotonic() - start < 1.4
    assert h.is_running()
    assert any(p.exec_id == h.exec_id and p.running for p in sbx.commands.list())
    r = h.wait()
    assert (r.exit_code, r.stdout, r.exec_id) == (0, "done\n", h.exec_id)


def test_background_kill(sbx: airlock.Sandbox) -> None:
    h = sbx.commands.run("sleep 600", background=True)
    sbx.commands.kill(h.exec_id)
    r = h.wait(timeout=30)
    assert r.killed or r.signal, r
    assert not h.is_running()


def test_background_signal(sbx: airlock.Sandbox) -> None:
    h = sbx.commands.run("trap 'echo got-hup; exit 7' HUP; echo ready; while :; do sleep 0.1; done", background=True)
    for _, text in h.stream(timeout=30):  # until the trap is set
        if "ready" in text:
            break
    h.signal("HUP")
    r = h.wait(timeout=30)
    assert (r.exit_code, r.stdout) == (7, "ready\ngot-hup\n")


def test_background_stream_and_callbacks(sbx: airlock.Sandbox) -> None:
    h = sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.3; done", background=True)
    chunks = list(h.stream(timeout=30))
    assert "".join(t for s, t in chunks if s == "stdout") == "1\n2\n3\n"
    seen: List[str] = []
    h2 = sbx.commands.run("echo a; sleep 0.5; echo b", background=True, on_stdout=seen.append)
    r = h2.wait(timeout=30)
    assert "".join(seen) == "a\nb\n" == r.stdout


def test_files(sbx: airlock.Sandbox) -> None:
    info = sbx.files.write("/workspace/notes.txt", "héllo\n", mode=0o600)
    assert info.size == len("héllo\n".encode()) and info.mode == 0o600
    assert sbx.files.read("/workspace/notes.txt") == "héllo\n"
    sbx.files.write("/workspace/blob.bin", bytes(range(256)))
    assert sbx.files.read("/workspace/blob.bin", format="bytes") == bytes(range(256))
    names = {f.name: f for f in sbx.files.list("/workspace")}
    assert names["notes.txt"].type == "file" and "blob.bin" in names
    assert sbx.commands.run("cat /workspace/notes.txt").stdout == "héllo\n"
    sbx.files.make_dir("/workspace/d/e")
    assert sbx.files.stat("/workspace/d/e").type == "dir"
    sbx.files.remove("/workspace/d", recursive=True)
    sbx.files.remove("/workspace/notes.txt")
    assert not sbx.files.exists("/workspace/notes.txt")
    with pytest.raises(airlock.NotFound) as ei:
        sbx.files.read("/workspace/notes.txt")
    assert ei.value.code == "not_found" and ei.value.status == 404 and ei.value.request_id


def test_egress_denials(sbx: airlock.Sandbox) -> None:
    r = sbx.commands.run(f"curl -sS -m 5 -o /dev/null https://{DENIED_HOST}/x; echo rc=$?", timeout=30)
    assert "rc=0" not in r.stdout
    deadline = time.monotonic() + 15
    while True:
        d = [e for e in sbx.egress.denials() if DENIED_HOST in e.destination]
        if d or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert d, [(e.kind, e.destination, e.verdict) for e in sbx.egress.events()]
    assert d[0].verdict == "deny" and d[0].rule.startswith("deny.hosts") and d[0].reason
    execs = sbx.egress.events(kind="exec")
    assert any(e.raw.get("id") == r.exec_id for e in execs)
    assert all(e.kind == "exec" for e in execs)
    assert all(e.verdict == "deny" for e in sbx.egress.events(verdict="deny"))
    assert sbx.egress.summary()["sandbox"] == sbx.id


def test_report(sbx: airlock.Sandbox) -> None:
    html = sbx.report()
    assert html.lstrip().lower().startswith("<!doctype html") and sbx.id in html
    md = sbx.report(html=False)
    assert sbx.id in md and "<html" not in md


def test_policy_explain(socket_path: str) -> None:
    ex = policy.explain(f"https://{DENIED_HOST}/x")
    assert ex.action == "deny" and ex.rule.startswith("deny.hosts[0]") and ex.reason and not ex.allowed
    ok = policy.explain("https://registry.example.test/airlock-demo", method="GET")
    assert ok.action == "allow" and ok.category == "registries" and ok.considered
    push = policy.explain("https://git.example.test/acme/demo.git/git-receive-pack", method="POST")
    assert push.action == "deny" and push.rule.startswith("categories.git.push")
    with pytest.raises(airlock.NotFound):
        policy.explain("https://x.example.test/", policy="no-such-policy")
    with pytest.raises(airlock.Invalid) as ei:
        policy.explain("FETCH nothing here")
    assert ei.value.code == "invalid"


def test_request_access(sbx: airlock.Sandbox) -> None:
    ap = sbx.request_access("https://docs.example.test/", reason="read the API docs")
    assert ap.status == "pending" and ap.id and ap.reason == "read the API docs"
    assert sbx.approval(ap.id).status == "pending"
    # A person decides (what `airlock approve ID --once` sends).
    sbx._t.request("POST", f"/approvals/{ap.id}", body={"approve": True, "once": True}).read()
    got = sbx.approval(ap.id)
    assert got.status == "granted" and got.decided_by
    ap2 = sbx.request_access("https://other.example.test/")
    sbx._t.request("POST", f"/approvals/{ap2.id}", body={"approve": False}).read()
    assert sbx.approval(ap2.id).status == "denied"


def test_previews_off(sbx: airlock.Sandbox) -> None:
    # The e2e appliance has no [preview] listener: expose says so, and
    # there is nothing to list or revoke.
    with pytest.raises(airlock.Invalid) as ei:
        sbx.expose(8080, ttl="5m")
    assert "[preview]" in str(ei.value)
    assert sbx.previews() == []
    with pytest.raises(airlock.NotFound):
        sbx.unexpose("pv0000000000000000")


def test_not_found_and_context_manager(socket_path: str) -> None:
    with pytest.raises(airlock.NotFound) as ei:
        airlock.Sandbox.connect("sb-does-not-exist")
    assert ei.value.status == 404 and ei.value.request_id.startswith("py-")
    with airlock.Sandbox.create(env={"GREETING": "hej"}) as s:
        sid = s.id
        assert s.commands.run("echo $GREETING").stdout == "hej\n"
        assert any(x["id"] == sid for x in airlock.Sandbox.list())
    with pytest.raises(airlock.NotFound):
        airlock.Sandbox.connect(sid)


def test_lifecycle_unknown_template(socket_path: str) -> None:
    with pytest.raises((airlock.NotFound, airlock.Invalid)) as ei:
        airlock.Sandbox.create(template="no-such-template")
    assert "no-such-template" in str(ei.value)


def test_lifecycle_older_appliance_state() -> None:
    # An appliance before the five states said "destroying" for ending.
    assert airlock.Sandbox({"id": "x", "state": "destroying"}, None).state == "ending"  # type: ignore[arg-type]
    assert airlock.Sandbox({"id": "x", "state": "paused"}, None).state == "paused"  # type: ignore[arg-type]


def test_lifecycle_states(socket_path: str) -> None:
    assert airlock.STATES == ("creating", "running", "paused", "ending", "ended")
    with airlock.Sandbox.create() as s:
        assert s.state == "running"
        s.pause()
        assert s.state == "paused"
        with pytest.raises(airlock.Conflict) as ei:
            s.commands.run("true")
        assert "paused" in str(ei.value)
        s.resume()
        assert s.state == "running"
        assert s.commands.run("echo back").stdout == "back\n"
        assert [x["state"] for x in airlock.Sandbox.list() if x["id"] == s.id] == ["running"]
    assert s.state == "ended"


def test_invalid_policy(socket_path: str) -> None:
    with pytest.raises((airlock.Invalid, airlock.NotFound)) as ei:
        airlock.Sandbox.create(policy="no-such-policy")
    assert ei.value.request_id


def test_bad_lockfile(socket_path: str) -> None:
    with pytest.raises(airlock.Invalid) as ei:
        airlock.Sandbox.create(lockfiles=[("app/requirements.txt", "idna==3.6\n")])
    assert "app/requirements.txt:1: idna: no --hash" in str(ei.value) and ei.value.request_id


def test_quota_exceeded(sbx: airlock.Sandbox) -> None:
    limit = int(os.environ["AIRLOCK_TEST_MAX_SANDBOXES"])
    made = []
    try:
        with pytest.raises(airlock.QuotaExceeded) as ei:
            for _ in range(limit):
                made.append(airlock.Sandbox.create())
        assert ei.value.status == 429 and ei.value.code == "quota_exceeded" and ei.value.request_id
        assert len(made) == limit - 1  # sbx is the first
    finally:
        for s in made:
            s.kill()


def test_tcp_token(socket_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, token = os.environ["AIRLOCK_TEST_TCP"], os.environ["AIRLOCK_TEST_TOKEN"]
    monkeypatch.setenv("AIRLOCK_CA_FILE", os.environ["AIRLOCK_TEST_CA_FILE"])
    with pytest.raises(airlock.Denied) as ei:
        airlock.Sandbox.list(url=url, token="wrong-token")
    assert ei.value.status == 401 and ei.value.code == "unauthorized" and ei.value.request_id
    assert isinstance(airlock.Sandbox.list(url=url, token=token), list)
    monkeypatch.setenv("AIRLOCK_URL", url)
    monkeypatch.setenv("AIRLOCK_TOKEN", token)
    assert isinstance(airlock.Sandbox.list(), list)
    monkeypatch.setenv("AIRLOCK_TOKEN", "")
    with pytest.raises(airlock.Denied):
        airlock.Sandbox.list()


def test_tls_verification(socket_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TLS listener is verified by the appliance CA or a pinned
    fingerprint; a wrong pin or an unknown CA is refused."""
    url, token = os.environ["AIRLOCK_TEST_TCP"], os.environ["AIRLOCK_TEST_TOKEN"]
    ca, fp = os.environ["AIRLOCK_TEST_CA_FILE"], os.environ["AIRLOCK_TEST_FINGERPRINT"]
    monkeypatch.delenv("AIRLOCK_CA_FILE", raising=False)
    monkeypatch.delenv("AIRLOCK_FINGERPRINT", raising=False)
    assert isinstance(airlock.Sandbox.list(url=url, token=token, ca_file=ca), list)
    assert isinstance(airlock.Sandbox.list(url=url, token=token, fingerprint=fp), list)
    colons = ":".join(fp[i:i + 2] for i in range(0, len(fp), 2)).upper()
    assert isinstance(airlock.Sandbox.list(url=url, token=token, fingerprint=colons), list)
    with pytest.raises(airlock.Unavailable) as ei:
        airlock.Sandbox.list(url=url, token=token, fingerprint="ab" * 32)
    assert "pinned fingerprint" in str(ei.value)
    with pytest.raises(airlock.Unavailable):
        airlock.Sandbox.list(url=url, token=token)  # the system roots do not know the appliance CA
    with pytest.raises(airlock.Invalid):
        airlock.Sandbox.list(url=url, token=token, fingerprint="abc")
    monkeypatch.setenv("AIRLOCK_FINGERPRINT", fp)
    assert isinstance(airlock.Sandbox.list(url=url, token=token), list)


def test_principals(socket_path: str) -> None:
    """Over TLS, each principal sees and touches only its own sandboxes;
    quotas refuse with Denied (403) and QuotaExceeded (429)."""
    url, ca = os.environ["AIRLOCK_TEST_TCP"], os.environ["AIRLOCK_TEST_CA_FILE"]
    alice = {"url": url, "token": os.environ["AIRLOCK_TEST_ALICE_TOKEN"], "ca_file": ca}
    bob = {"url": url, "token": os.environ["AIRLOCK_TEST_BOB_TOKEN"], "ca_file": ca}
    with airlock.Sandbox.create(timeout=60, **alice) as sbx:
        assert sbx.commands.run("echo mine").stdout.strip() == "mine"
        assert [s["id"] for s in airlock.Sandbox.list(**alice)] == [sbx.id]
        assert airlock.Sandbox.list(**bob) == []
        with pytest.raises(airlock.NotFound) as ei:
            airlock.Sandbox.connect(sbx.id, **bob)
        assert ei.value.status == 404 and ei.value.request_id
        with pytest.raises(airlock.Denied) as di:
            airlock.Sandbox.create(image="localhost/airlock/busybox:1", **bob)
        assert di.value.status == 403 and di.value.code == "forbidden" and "quota.images" in str(di.value)
        with airlock.Sandbox.create(**bob) as mine:
            with pytest.raises(airlock.QuotaExceeded) as qi:
                airlock.Sandbox.create(**bob)
            assert qi.value.status == 429 and "quota.sandboxes" in str(qi.value)
            assert [s["id"] for s in airlock.Sandbox.list(**bob)] == [mine.id]
        local = {s["id"] for s in airlock.Sandbox.list()}  # the unix socket: the admin "local"
        assert sbx.id in local


def test_unreachable() -> None:
    with pytest.raises(airlock.Unavailable) as ei:
        airlock.Sandbox.list(url="unix:///nonexistent/airlock.sock")
    assert "no airlock appliance" in str(ei.value)
    with pytest.raises(airlock.Invalid):
        airlock.Sandbox.list(url="ftp://host")


def test_wait_after_the_command_was_recorded(sbx: airlock.Sandbox) -> None:
    h = sbx.commands.run("echo quick; exit 4", background=True)
    deadline = time.monotonic() + 20
    while any(p.exec_id == h.exec_id for p in sbx.commands.list()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(sbx.commands.connect(h.exec_id).stream()) == []
    r = sbx.commands.connect(h.exec_id).wait()  # the agent forgot it: from its record
    assert (r.exit_code, r.stdout, r.raw.get("recorded")) == (4, "quick\n", True)
    r = h.wait()  # the handle followed it from the start
    assert (r.exit_code, r.stdout) == (4, "quick\n")
