#!/usr/bin/env bash
# dsvisor start under a fake systemd: a test binds an AF_UNIX
# datagram socket as NOTIFY_SOCKET and reads what the supervisor sends: FDSTORE=1 with the
# weight memfd attached, READY=1 once both instances are ready, STATUS= lines, WATCHDOG=1
# every <= WATCHDOG_USEC/2, STOPPING=1 on SIGTERM. Then it starts a second supervisor the
# way systemd restarts one, with the stored memfd as fd 3 (LISTEN_FDS, LISTEN_FDNAMES,
# LISTEN_PID), and checks that the weights are re-attached instead of reloaded. A third
# one reloads a new model: FDSTOREREMOVE=1 for the old images, FDSTORE=1 for the new, a
# raised WATCHDOG_USEC while they load. Without NOTIFY_SOCKET the lifecycle test covers
# the same binary unchanged.
set -euo pipefail
exec python3 - "${DSV_BUILD_DIR:?}/bin" "${DSV_FIXTURES:?}/models/qwen2-bf16-tied" <<'EOF'
import array, json, os, signal, socket, subprocess, sys, tempfile, time

bindir, model = sys.argv[1], sys.argv[2]
dsvisor = os.path.join(bindir, "dsvisor")
worker = os.path.join(bindir, "test-supervisor-stub-worker")
tmp = tempfile.mkdtemp(prefix="test-supervisor-notify.")
failed = 0

def check(what, ok):
    global failed
    print(("ok     " if ok else "NOT OK ") + what, flush=True)
    if not ok:
        failed += 1

sock_path = os.path.join(tmp, "notify.sock")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sock_path)
sock.settimeout(0.2)
msgs = []  # (time, text, fds)

def pump(until, pred=None):
    """Reads notifications until `until` (monotonic) or until pred(msg) is true."""
    while time.monotonic() < until:
        try:
            data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        except socket.timeout:
            continue
        fds = []
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[: len(cdata) - len(cdata) % 4])
                fds.extend(a)
        m = (time.monotonic(), data.decode(), fds)
        msgs.append(m)
        if pred and pred(m):
            return m
    return None

env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="1000000", DSV_CACHE_DIR=os.path.join(tmp, "cache"))
env.pop("LISTEN_FDS", None)
run = os.path.join(tmp, "run")
args = [dsvisor, "start", "--model", model, "--instances", "2", "--port", "0", "--runtime-dir", run,
        "--worker", worker, "--hugepages", "off", "--grace-ms", "2000"]
log1 = open(os.path.join(tmp, "start1.log"), "w")
p = subprocess.Popen(args, env=env, stdout=log1, stderr=subprocess.STDOUT)

ready = pump(time.monotonic() + 120, lambda m: "READY=1" in m[1].split("\n"))
check("READY=1 once the instances are ready", ready is not None)
store = [m for m in msgs if "FDSTORE=1" in m[1].split("\n")]
check("FDSTORE=1 with one fd and an FDNAME, before READY=1", len(store) == 1 and len(store[0][2]) == 1
      and "FDNAME=dsvisor-weights-n0-" in store[0][1])
status = subprocess.run([dsvisor, "status", "--json", "--runtime-dir", run], capture_output=True, text=True)
st = json.loads(status.stdout) if status.returncode == 0 else {}
image_bytes = st.get("weights", [{}])[0].get("bytes", -1)
stored_fd = store[0][2][0] if store and store[0][2] else -1
check("the stored fd is the weight image (%d bytes)" % image_bytes,
      stored_fd >= 0 and os.fstat(stored_fd).st_size == image_bytes)
check("READY=1 comes with STATUS=2/2 instances ready", ready is not None and "STATUS=2/2 instances ready" in ready[1])

t0 = time.monotonic()
pump(t0 + 3.0)
pings = [m[0] for m in msgs if m[1] == "WATCHDOG=1" and m[0] >= t0]
gaps = [b - a for a, b in zip(pings, pings[1:])]
check("WATCHDOG=1 every <= WATCHDOG_USEC/2 (%d pings in 3 s, largest gap %.2f s)" % (len(pings), max(gaps or [9])),
      len(pings) >= 5 and max(gaps or [9]) <= 0.55)

os.kill(st["instances"][1]["pid"], signal.SIGKILL)
m = pump(time.monotonic() + 30, lambda m: m[1].startswith("STATUS=2/2 instances ready, 1 restarts"))
check("STATUS= follows a worker restart (1/2, then 2/2 with 1 restart)",
      m is not None and any(x[1].startswith("STATUS=1/2") for x in msgs))

p.send_signal(signal.SIGTERM)
m = pump(time.monotonic() + 30, lambda m: "STOPPING=1" in m[1].split("\n"))
check("STOPPING=1 on SIGTERM", m is not None)
rc = p.wait(timeout=30)
check("exit status 0 after SIGTERM", rc == 0)

# A restart under systemd: the fd store hands the memfd back as fd 3.
name = [l for l in store[0][1].split("\n") if l.startswith("FDNAME=")][0][len("FDNAME="):] if store else "x"
env2 = dict(env, LISTEN_FDS="1", LISTEN_FDNAMES=name)
env2.pop("WATCHDOG_USEC")
log2 = open(os.path.join(tmp, "start2.log"), "w")
p2 = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh"] + args, env=env2, stdout=log2,
                      stderr=subprocess.STDOUT, pass_fds=(3,), preexec_fn=lambda: os.dup2(stored_fd, 3))
ready = pump(time.monotonic() + 120, lambda m: "READY=1" in m[1].split("\n"))
status = subprocess.run([dsvisor, "status", "--json", "--runtime-dir", run], capture_output=True, text=True)
st2 = json.loads(status.stdout) if status.returncode == 0 else {}
w = st2.get("weights", [{}])[0]
check("after a supervisor restart the weights come from the fd store", ready is not None and w.get("from_fd_store") is True)
check("no second FDSTORE=1 for re-attached weights",
      len([m for m in msgs if "FDSTORE=1" in m[1].split("\n")]) == 1)
subprocess.run([dsvisor, "stop", "--runtime-dir", run], timeout=60)
check("second supervisor stopped with status 0", p2.wait(timeout=30) == 0)

# A reload with a new model: the old images leave the fd store, the new ones join it, and
# the watchdog timeout is raised while they load and set back after.
model_b = os.path.join(os.path.dirname(model), "llama3-rope-gqa")
cfg = os.path.join(tmp, "cfg.json")
with open(cfg, "w") as f:
    json.dump({"model": model}, f)
args3 = [dsvisor, "start", "--config", cfg, "--instances", "2", "--port", "0", "--runtime-dir", run,
         "--worker", worker, "--hugepages", "off", "--grace-ms", "2000"]
log3 = open(os.path.join(tmp, "start3.log"), "w")
msgs.clear()
p3 = subprocess.Popen(args3, env=env, stdout=log3, stderr=subprocess.STDOUT)
ready = pump(time.monotonic() + 120, lambda m: "READY=1" in m[1].split("\n"))
old_store = [m for m in msgs if "FDSTORE=1" in m[1].split("\n")]
with open(cfg, "w") as f:
    json.dump({"model": model_b}, f)
t0 = time.monotonic()
p3.send_signal(signal.SIGHUP)
pump(time.monotonic() + 60, lambda m: m[0] >= t0 and "FDSTORE=1" in m[1].split("\n"))
pump(time.monotonic() + 1.0)
after = [m for m in msgs if m[0] >= t0]
def index(pred):
    return next((i for i, m in enumerate(after) if pred(m[1].split("\n"))), -1)
old_name = [l for l in old_store[0][1].split("\n") if l.startswith("FDNAME=")][0] if old_store else "FDNAME=?"
i_remove = index(lambda ls: "FDSTOREREMOVE=1" in ls and old_name in ls)
i_store = index(lambda ls: "FDSTORE=1" in ls)
i_raise = index(lambda ls: "WATCHDOG_USEC=3600000000" in ls and "STATUS=reloading: loading the weights" in ls)
i_back = index(lambda ls: "WATCHDOG_USEC=1000000" in ls)
check("reload: the old weights leave the fd store (%s) before the new ones join it" % old_name,
      ready is not None and 0 <= i_remove < i_store and len(after[i_store][2]) == 1 and old_name not in after[i_store][1])
check("reload: the watchdog timeout is raised while the weights load and set back after",
      0 <= i_raise < i_store < i_back)
subprocess.run([dsvisor, "stop", "--runtime-dir", run], timeout=60)
check("third supervisor stopped with status 0", p3.wait(timeout=30) == 0)

if failed:
    for f in ("start1.log", "start2.log", "start3.log"):
        print("--- " + f)
        print(open(os.path.join(tmp, f)).read())
subprocess.run(["rm", "-rf", tmp])
print("%d failed" % failed)
sys.exit(1 if failed else 0)
EOF
