"""What policy-written code would try, as code for `npu-rl sandbox serve` (each prints what it got), and a
client of the service's HTTP API: tests/sandbox sends them to the service as a process, tests/containers to
the service as compose starts it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


class Client:
    """SandboxFusion's API at ``url`` (``http://host:port``)."""

    def __init__(self, url: str):
        self.url = url

    def post(self, body, timeout: float = 120) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + "/run_code", data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def run(self, code: str, language: str = "python", **fields) -> dict:
        status, answer = self.post({"code": code, "language": language, "run_timeout": 10, **fields})
        assert status == 200, answer
        return answer

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=30) as r:
            return json.loads(r.read())


READ = """
import sys
for path in sys.argv[1:] or {paths!r}:
    try:
        print("READ", path, open(path).read())
    except OSError as e:
        print("DENIED", path, type(e).__name__)
"""


def read_code(paths: list[str]) -> str:
    return READ.format(paths=paths)


ENVIRONS = """
import os
seen = [open("/proc/self/environ", "rb").read()] + [repr(dict(os.environ)).encode()]
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        seen.append(open(f"/proc/{pid}/environ", "rb").read())
    except OSError:
        pass
print("SEEN", len(seen), b"".join(seen).decode(errors="replace"))
"""


CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"hello from the sandbox")
    print("CONNECTED")
except OSError as e:
    print("REFUSED", type(e).__name__)
try:
    print("RESOLVED", socket.getaddrinfo("pypi.org", 443)[0][4])
except OSError as e:
    print("UNRESOLVED", type(e).__name__)
"""


FORKS = """
import os, time
n = 0
for _ in range({n}):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError:
        break
print("FORKED", n)
"""


ALLOC = """
try:
    block = bytearray({mb} << 20)
    print("ALLOCATED", len(block) >> 20)
except MemoryError:
    print("REFUSED")
"""


MEMFD = """
import os
try:
    fds = [os.memfd_create(str(i)) for i in range(3)]
    for fd in fds:
        for _ in range(64):
            os.write(fd, b"x" * (1 << 20))
    print("HELD", sum(os.fstat(fd).st_size for fd in fds) >> 20)
except OSError as e:
    print("REFUSED", e.errno)
"""


KEYRING = """
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
keyctl = {"x86_64": 250, "aarch64": 219}[platform.machine()]
# KEYCTL_GET_KEYRING_ID of the session keyring: the kernel's keyrings are not namespaced.
got = libc.syscall(keyctl, 0, -3, 0)
print("KEYRING", got if got >= 0 else -ctypes.get_errno())
"""


ESCAPE = """
import os, subprocess, sys, time
# A child in a session of its own, and a grandchild double-forked away from it: both loop for ever.
subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(1)
    os._exit(0)
while True:
    pass
"""


PRINT = "import sys\nsys.stdout.write('x' * (100 << 20))\nprint('END', file=sys.stderr)"


FILL = """
import os
written = 0
try:
    for i in range({files}):
        with open(f"fill{{i}}", "wb") as f:
            for _ in range(8):
                f.write(b"x" * (1 << 20))
                written += 1 << 20
except OSError as e:
    print("STOPPED", type(e).__name__, e.errno)
print("WRITTEN", written >> 20)
"""


ELSEWHERE = """
import errno
for path in ("/x", "/usr/x", "/dev/x", "/proc/x"):
    try:
        open(path, "wb").write(b"x" * (1 << 20))
        print("WROTE", path)
    except OSError as e:
        print("REFUSED", path, errno.errorcode[e.errno])
"""


LEAVE = "open('left_behind', 'w').write('x'); open('/tmp/left_behind', 'w').write('x')"


LOOK = "import os; print(os.path.exists('left_behind'), os.path.exists('/tmp/left_behind'), sorted(os.listdir('.')))"


CONNECT_ANY = """
import socket
for host, port in (("127.0.0.1", 8080), ("8.8.8.8", 53), ("pypi.org", 443)):
    try:
        socket.create_connection((host, port), timeout=3)
        print("CONNECTED", host)
    except OSError as e:
        print("REFUSED", host, type(e).__name__)
"""


def contained_in_a_container(sandbox: Client) -> None:
    """The hostile cases against a sandbox in its container (compose's service, the job's pod): each contained
    as in tests/sandbox/test_hostile.py, and a healthy request answered after them."""
    run = sandbox.run
    # The container's own secrets and what a workspace would hold are not in the jail's root.
    out = run(read_code(["/etc/passwd", "/etc/hostname", "/workspace", "/opt/npu-rl/pyproject.toml"]))
    assert out["run_result"]["stdout"].count("DENIED") == 4, out
    assert "NPU_RL_SANDBOX_PYTHON" not in run(ENVIRONS)["run_result"]["stdout"]
    assert "CONNECTED" not in run(CONNECT_ANY)["run_result"]["stdout"]
    bomb = run(":(){ :|:& };:", "bash", run_timeout=3)
    assert bomb["run_result"]["status"] in ("Finished", "TimeLimitExceeded"), bomb
    assert int(run(FORKS.format(n=300), run_timeout=5)["run_result"]["stdout"].split()[-1]) < 64
    assert run(ALLOC.format(mb=256), memory_limit_MB=128)["run_result"]["stdout"].strip() == "REFUSED"
    assert run(MEMFD, memory_limit_MB=128)["run_result"]["stdout"].strip() == "REFUSED 1"
    assert run(KEYRING)["run_result"]["stdout"].strip() == "KEYRING -1"
    assert run(ESCAPE, run_timeout=2)["run_result"]["status"] == "TimeLimitExceeded"
    printed = run(PRINT)["run_result"]
    assert len(printed["stdout"]) < (1 << 20) + 200 and "output cut at" in printed["stdout"]
    assert "STOPPED OSError 28" in run(FILL.format(files=32))["run_result"]["stdout"]
    assert "WROTE" not in run(ELSEWHERE)["run_result"]["stdout"]
    run(LEAVE)
    assert run(LOOK)["run_result"]["stdout"].strip() == "False False ['main.py']"
    killer = run('sleep 60 & kill -9 -1; wait $!; echo "ended by $(kill -l $?)"', "bash")
    assert killer["run_result"]["stdout"] == "ended by KILL\n", killer
    healthy = run("import numpy, sympy\nprint(sympy.factorint(int(numpy.int64(2**16 - 1))))")
    assert healthy["status"] == "Success" and healthy["run_result"]["stdout"] == "{3: 1, 5: 1, 17: 1, 257: 1}\n"
