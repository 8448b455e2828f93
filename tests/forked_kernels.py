"""Notebook kernels for nbval, forked from a process that has already imported the libraries.

A chapter's kernel spends about 4.5 s of CPU before its first cell does anything: Python and
ipykernel start, then the chapter imports torch (2.2 s), matplotlib (1 s) and attncore. Over
the course's notebooks that is two minutes of the suite's CPU, the same imports each time.
Here one process per pytest worker, the *zygote*, imports them once and waits; each kernel
that nbval asks for is a fork of it, which then runs ipykernel exactly as
``python -m ipykernel_launcher -f CONNECTION_FILE`` does, in the environment, working
directory and standard streams that jupyter_client gave the kernel. The notebook's cells run
as in a fresh kernel (their own ``import`` lines still run; the modules are simply found
already loaded), and nbval compares their outputs as before.

Three parts, all in this file:

- :func:`install` (called from tests/conftest.py in each pytest worker that will run a
  notebook): writes the kernel spec ``attncore-forked`` into a temporary folder on
  ``JUPYTER_PATH`` and starts the zygote;
- the kernel spec's command, ``python forked_kernels.py launch -f CONNECTION_FILE``: the
  *launcher*, the process jupyter_client starts, watches, signals and kills as the kernel. It
  hands its request and its standard streams to the zygote over a Unix socket, forwards
  SIGINT and SIGTERM to the forked kernel, and exits with the kernel's status. Where there is
  no zygote, or it does not answer, it becomes a plain kernel (``exec`` of
  ``python -m ipykernel_launcher``): the notebook runs either way;
- ``python forked_kernels.py zygote SOCKET``: the zygote. It exits when the worker does (its
  stdin closes), and kills a kernel whose launcher has gone (its connection closes).

Linux only. Forking after the imports is safe there because they start no thread of their
own that a fork would break: the zygote checks before each fork that Python runs no thread
but the main one, and runs nothing in torch (whose OpenMP threads start with its first
parallel operation); OpenBLAS, which NumPy starts threads for where a worker has more than
one, stops them before a fork and starts them again after. Elsewhere, and with
``ATTNCORE_FRESH_KERNELS=1``, nbval starts its kernels as usual.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

KERNEL_NAME = "attncore-forked"
# What the chapters import, loaded once in the zygote. Not matplotlib.pyplot's backend:
# matplotlib-inline hooks itself into IPython when it is imported, which must happen in the
# kernel, after IPython has started (as in a fresh kernel).
PRELOAD = ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "IPython", "ipykernel.ipkernel",
           "ipykernel.kernelapp", "attncore", "attncore.lab", "attncore.lab.plotting",
           "attncore.lab.opening_figures")
# Variables read when a module is imported: a zygote started under other values would give
# kernels other modules than a fresh kernel gets, so the launcher falls back to one.
IMPORT_TIME_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX", "OMP_NUM_THREADS",
                         "MKL_NUM_THREADS", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
                         "MPLBACKEND", "MPLCONFIGDIR")
# Signals the launcher passes on to the kernel (jupyter_client interrupts a kernel with
# SIGINT and ends it with SIGTERM, sent to the launcher's process group).
FORWARDED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                  if hasattr(signal, name))     # (Windows has neither SIGHUP nor SIGQUIT)
INLINE = "module://matplotlib_inline.backend_inline"   # what ipykernel sets MPLBACKEND to


def forks_here() -> bool:
    """Whether this system is one where kernels are forked (Linux)."""
    return sys.platform == "linux"


def available() -> bool:
    """Whether nbval's kernels are to be forked here: on Linux, unless
    ``ATTNCORE_FRESH_KERNELS=1`` asks for fresh ones."""
    return forks_here() and os.environ.get("ATTNCORE_FRESH_KERNELS") != "1"


# --- in the pytest worker ------------------------------------------------------------------

class Zygote:
    """The kernel spec and the zygote of one pytest worker; :meth:`close` stops the zygote."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.socket = folder / "zygote.sock"
        spec = folder / "kernels" / KERNEL_NAME
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, str(Path(__file__).resolve()), "launch", "-f",
                     "{connection_file}"],
            "display_name": "Python 3 (forked)", "language": "python",
            "metadata": {"debugger": False}}))
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "zygote", str(self.socket)],
            stdin=subprocess.PIPE, start_new_session=True)
        spec_file = spec / "kernel.json"
        spec_doc = json.loads(spec_file.read_text())
        spec_doc["env"] = {"ATTNCORE_KERNEL_ZYGOTE": f"{self.process.pid}:{self.socket}"}
        spec_file.write_text(json.dumps(spec_doc))
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [str(folder), *filter(None, [os.environ.get("JUPYTER_PATH")])])

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()              # the zygote's signal to stop
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def install() -> Zygote:
    """Start this worker's zygote and make ``attncore-forked`` a kernel spec nbval can use."""
    return Zygote(Path(tempfile.mkdtemp(prefix="attncore-kernels-")))


# --- the launcher: the kernel's process as jupyter_client sees it ---------------------------

def _plain_kernel(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def launch(argv: list[str]) -> None:
    zygote_pid, _, path = os.environ.pop("ATTNCORE_KERNEL_ZYGOTE", "").partition(":")
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # The zygote makes its socket once it has imported the libraries; until then, and
        # while it lives, wait for it.
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if not zygote_pid.isdigit() or not _alive_pid(int(zygote_pid)) \
                    or time.monotonic() > deadline:
                raise OSError("no zygote")
            time.sleep(0.05)
        conn.settimeout(30)
        conn.connect(path)
        socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        pid = int(_read_line(conn) or 0)            # the kernel's pid, or 0: not forked
    except (OSError, ValueError):
        pid = 0
    if pid == 0:
        conn.close()
        _plain_kernel(argv)

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    conn.settimeout(None)
    status = _read_line(conn)                       # the kernel's exit status, at its end
    os._exit(int(status) if status.lstrip("-").isdigit() else 1)


def _alive_pid(pid: int) -> bool:
    """Whether the process runs (a zygote that has exited stays a zombie until the worker
    reaps it: that counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(64)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


# --- the zygote ----------------------------------------------------------------------------

def zygote(path: str) -> None:
    os.environ.setdefault("MPLBACKEND", INLINE)      # as ipykernel would, before matplotlib
    preload_env = {k: os.environ.get(k) for k in IMPORT_TIME_VARIABLES}
    preload_env["MPLBACKEND"] = None if preload_env["MPLBACKEND"] == INLINE else \
        preload_env["MPLBACKEND"]
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:       # noqa: BLE001  (a kernel imports it, and says why, itself)
            pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    os.rename(path + ".tmp", path)                  # launchers connect once it is ready
    server.listen(16)
    kernels: dict[int, socket.socket] = {}          # pid -> its launcher's connection
    while True:
        watched = [sys.stdin, server, *kernels.values()]
        try:
            ready, _, _ = select.select(watched, [], [], 0.5)
        except InterruptedError:
            ready = []
        _reap(kernels)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            break                                   # the worker has gone
        for pid, conn in list(kernels.items()):
            if conn in ready and not _alive(conn):  # its launcher has gone
                _kill(pid)
        if server in ready:
            conn, _ = server.accept()
            pid = _fork_kernel(conn, preload_env, server)
            conn.sendall(f"{pid}\n".encode())
            if pid:
                kernels[pid] = conn
            else:
                conn.close()
    for pid in kernels:
        _kill(pid)
    os.unlink(path)


def _reap(kernels: dict[int, socket.socket]) -> None:
    for pid in list(kernels):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn = kernels.pop(pid)
            try:
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def _alive(conn: socket.socket) -> bool:
    try:
        return bool(conn.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _fork_kernel(conn: socket.socket, preload_env: dict, server: socket.socket) -> int:
    """Read a launcher's request; fork the kernel it asks for. Its pid, or 0 where a fresh
    kernel must start instead."""
    conn.settimeout(10)
    try:
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        size = struct.unpack("!I", head)[0]
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise OSError("short request")
            body += chunk
        request = json.loads(body)
    except (OSError, ValueError, struct.error):
        return 0
    env = request["env"]
    if len(fds) != 3 or any(env.get(k) != v for k, v in preload_env.items()) \
            or threading.active_count() != 1:
        for fd in fds:
            os.close(fd)
        return 0
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    # the kernel
    try:
        os.setsid()
        server.close()
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL if signum != signal.SIGINT
                          else signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        # as `python -m ipykernel_launcher` has them: the working directory first on the
        # path (ipykernel_launcher then removes it, and IPython puts '' back)
        sys.path[0] = os.getcwd()
        sys.argv = [str(Path(sys.modules["ipykernel"].__file__).parent.parent
                        / "ipykernel_launcher.py"), *request["argv"]]
        if "numpy" in sys.modules:          # a fresh import seeds it from the OS
            sys.modules["numpy"].random.seed()
        if sys.path[0] == "" or Path(sys.path[0]) == Path.cwd():
            del sys.path[0]
        from ipykernel import kernelapp
        # ipykernel read these when the zygote imported it; a fresh kernel reads its own
        # (without a parent it prints a console banner on the notebook's stdout)
        kernelapp.IPKernelApp.launch_instance(
            parent_handle=int(os.environ.get("JPY_PARENT_PID") or 0),
            interrupt=int(os.environ.get("JPY_INTERRUPT_EVENT") or 0))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:   # noqa: BLE001
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch(sys.argv[2:])
    elif sys.argv[1] == "zygote":
        zygote(sys.argv[2])
