"""The notebooks' forked kernels (forked_kernels.py) are kernels as nbval's fresh ones are: the
same paths, working directory, matplotlib backend and display hooks, fresh random state, no
console banner; a kernel ends with its launcher; without a zygote the launcher is a plain
kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import forked_kernels
import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.skipif(not forked_kernels.forks_here(),
                                reason="kernels are forked on Linux only; this system is "
                                       f"{sys.platform}")

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"

# What a notebook could tell apart between two kernels (the connection file's name aside).
PROBE = r"""
import os, sys, json, signal, threading
import matplotlib, numpy
ip = get_ipython()
print(json.dumps(dict(
    path=sys.path, cwd=os.getcwd(), argv0=sys.argv[0], executable=sys.executable,
    backend=matplotlib.get_backend(), env=sorted(os.environ),
    hooks=[type(f.__self__).__name__ + "." + f.__name__
           for f in ip.events.callbacks["post_execute"]],
    sigint=str(signal.getsignal(signal.SIGINT)), threads=threading.active_count(),
    displayhook=type(sys.displayhook).__name__, stdout=type(sys.stdout).__name__,
    main=type(sys.modules["__main__"]).__name__, random=numpy.random.rand())))
"""


def run(kernel_name: str, code: str) -> list[str]:
    """The stream text and display messages of ``code`` in a new kernel."""
    km, kc = start_new_kernel(kernel_name=kernel_name, cwd=str(CHAPTERS),
                              stderr=open(os.devnull, "w"))
    seen: list[str] = []

    def keep(message):
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            seen.append(content["text"])
        elif kind == "display_data":
            seen.append("display " + " ".join(sorted(content["data"])))

    try:
        kc.execute_interactive(code, output_hook=keep, timeout=60)
        return seen
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()


@pytest.fixture(scope="module")
def zygote():
    z = forked_kernels.install()
    yield z
    z.close()


def test_a_forked_kernel_is_a_fresh_kernel_to_the_notebook(zygote):
    plain = run("python3", PROBE + "import matplotlib.pyplot as plt; plt.plot([1]); plt.show()")
    forked = run(forked_kernels.KERNEL_NAME,
                    PROBE + "import matplotlib.pyplot as plt; plt.plot([1]); plt.show()")
    a, b = json.loads(plain[0]), json.loads(forked[0])
    assert a.pop("random") != b.pop("random")       # each seeded afresh, not the zygote's
    assert a == b
    assert plain[1:] == forked[1:] == ["display image/png text/plain"]


def test_the_kernel_is_a_fork_of_the_zygote_and_dies_with_its_launcher(zygote):
    km, kc = start_new_kernel(kernel_name=forked_kernels.KERNEL_NAME, cwd=str(CHAPTERS),
                              stderr=open(os.devnull, "w"))
    try:
        got: list[str] = []
        kc.execute_interactive("import os, sys; print(os.getpid(), os.getppid(), "
                               "'torch' in sys.modules)",
                               output_hook=lambda m: got.append(m["content"].get("text", "")))
        pid, ppid, preloaded = "".join(got).split()
        assert int(ppid) == zygote.process.pid and preloaded == "True"
        km.provisioner.process.kill()                   # the launcher, as jupyter_client does
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the forked kernel outlived its launcher")
    finally:
        kc.stop_channels()
        km.cleanup_resources()


def test_the_launcher_interrupts_the_kernel(zygote):
    km, kc = start_new_kernel(kernel_name=forked_kernels.KERNEL_NAME, cwd=str(CHAPTERS),
                              stderr=open(os.devnull, "w"))
    try:
        kc.execute("import time; time.sleep(60)")
        time.sleep(1)
        started = time.monotonic()
        km.interrupt_kernel()               # nbval does this when a cell runs out of time
        reply = kc.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert time.monotonic() - started < 20
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()


def test_without_a_zygote_the_launcher_is_a_plain_kernel(tmp_path, monkeypatch):
    # a kernel spec whose zygote is not there: the notebook still gets a kernel
    spec = tmp_path / "kernels" / "no-zygote"
    spec.mkdir(parents=True)
    argv = [sys.executable, forked_kernels.__file__, "launch", "-f", "{connection_file}"]
    # a zygote that has exited and is not yet reaped (a zombie, as a zygote that failed is
    # until its worker ends): the launcher must not wait for it
    gone = subprocess.Popen(["true"])
    while Path(f"/proc/{gone.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.05)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": argv, "display_name": "x", "language": "python",
        "env": {"ATTNCORE_KERNEL_ZYGOTE": f"{gone.pid}:{tmp_path / 'none.sock'}"}}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    started = time.monotonic()
    seen = run("no-zygote", "import sys; print(sys.argv[0].endswith('ipykernel_launcher.py'))")
    assert seen == ["True\n"]
    assert time.monotonic() - started < 30
    gone.wait()
