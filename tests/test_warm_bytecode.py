"""scripts/warm_bytecode.py: the modules it names exist, it marks the cache warm when it has
imported them all, and it stops when the process that started it is gone."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "warm_bytecode.py"
sys.path.insert(0, str(SCRIPT.parent))

import warm_bytecode  # noqa: E402


def _exists(name: str) -> bool:
    # Found without importing it (transformers' import alone takes seconds): the top-level
    # package's spec, then the submodule's file or package folder under it.
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    if not rest:
        return True
    base = Path(spec.submodule_search_locations[0]).joinpath(*rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_module_it_warms_is_installed():
    missing = [name for group in warm_bytecode.GROUPS for name in group if not _exists(name)]
    assert not missing, f"scripts/warm_bytecode.py names modules not installed: {missing}"


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=SCRIPT.parent, text=True,
                          capture_output=True, timeout=120)


def test_it_writes_its_stamp_after_the_last_group(tmp_path):
    stamp = tmp_path / "warm"
    done = _run("import warm_bytecode as w\n"
                "w.GROUPS = (('json',), ('no_such_module_here', 'csv'))\n"
                f"print(w.warm({str(stamp)!r}, 'abc'))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert stamp.read_text() == "abc\n"


@pytest.mark.skipif(sys.platform == "win32", reason="a process whose parent has gone is "
                    "given a new parent on Linux and macOS, which the script looks for")
def test_it_stops_when_its_parent_is_gone(tmp_path):
    # A parent that starts it and leaves at once, as pytest does at the end of a short run:
    # the group that sleeps is killed within a poll or two, and no stamp is written.
    stamp, marker = tmp_path / "warm", tmp_path / "pid"
    child = tmp_path / "child.py"
    child.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(SCRIPT.parent)!r})\n"
        "import warm_bytecode as w\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "w.GROUPS = (('time',),)\n"
        "w._import = lambda group: [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        f"sys.exit(0 if w.warm({str(stamp)!r}, 'abc') else 1)\n")
    parent = _run("import subprocess, sys, time\n"
                  f"subprocess.Popen([sys.executable, {str(child)!r}],\n"
                  "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                  "time.sleep(1.0)\n", tmp_path)
    assert parent.returncode == 0, parent.stderr
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "warm_bytecode.py outlived its parent"
    assert not stamp.exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
