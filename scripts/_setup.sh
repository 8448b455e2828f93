# Sourced by build-book, test and lab: makes .venv/ and installs the course into it with
# install.py (the two commands the README gives for every system, here run for you):
# torch (its CPU build on Linux), requirements.txt, requirements-no-deps.txt (the real models'
# packages, with --no-deps) and attncore, editable. Installs again only when one of those
# files changed since the last set-up.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

pick_python() {
  # The course runs on Python 3.11 to 3.14 (pyproject.toml's requires-python).
  for p in python3.11 python3.12 python3.13 python3.14 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
       "$p" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 14) else 1)'; then
      echo "$p"; return
    fi
  done
  echo "error: the course needs Python 3.11 to 3.14; none found on PATH" >&2
  exit 1
}

quiet() {
  # This workplace's pip configuration prints a warning per package for local index
  # folders it ignores; keep the log readable, keep the exit status.
  "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

stamp_now="$(cat "$ROOT/install.py" "$ROOT/requirements.txt" "$ROOT/requirements-no-deps.txt" \
             "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
UV="$(grep -E "^uv==" "$ROOT/requirements.txt" || echo uv)"
if [ ! -x "$PY" ]; then
  echo "== creating virtual environment .venv/"
  base="$(pick_python)"
  # Without pip; the base Python's own pip (22.3 or later, for --python) then puts pip and uv
  # into it in one call. Measured on 2 cores, the whole set-up from uv's cache: 14.6-17.8 s,
  # against 17.7-24.5 s with venv's ensurepip (the standard library's pip 23.2.1), then pip
  # brought up to date, then uv (five runs each). Where the base Python has no such pip, venv
  # installs its own.
  if "$base" -m venv --without-pip "$VENV" &&
     "$base" -m pip --python "$PY" install -q --upgrade pip "$UV" >/dev/null 2>&1; then
    bootstrapped=1
  else
    rm -rf "$VENV"
    "$base" -m venv "$VENV"
  fi
fi
if [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$stamp_now" ]; then
  echo "== installing the course into .venv/ (first run takes a few minutes)"
  # install.py with uv's pip: the same packages from where pip's configuration says, in
  # seconds, against pip's minutes (measured on 2 cores: pip 150-190 s; uv 10 s, and 76 s of
  # CPU more to compile the bytecode of all 15,900 modules, which uv is not asked to do:
  # Python compiles the modules a program imports, once, below). Where uv cannot be had or
  # fails, pip, as the README's install.py does; pip is brought up to date either way.
  if { [ -n "${bootstrapped:-}" ] || quiet "$PY" -m pip install -q --upgrade pip "$UV"; } &&
     quiet "$PY" "$ROOT/install.py" --quiet --uv; then
    :
  else
    echo "== uv did not install the course; pip will"
    quiet "$PY" -m pip install -q --upgrade pip
    quiet "$PY" "$ROOT/install.py" --quiet
  fi
  echo "$stamp_now" > "$VENV/.requirements.sha256"
fi
export PATH="$VENV/bin:$PATH"
# Python's compiled modules (the environment's and the course's own) are written once, the
# first time a module is imported, into one folder inside .venv/, never next to the sources:
# the repository stays clean, and every later process (the notebooks' kernels, pytest's
# workers, whose rewritten test modules are cached there too) starts from the cache. A
# PYTHONDONTWRITEBYTECODE in the environment would make every process compile torch again.
export PYTHONPYCACHEPREFIX="$VENV/pycache"
export PYTHONDONTWRITEBYTECODE=
