# Sourced by build-book, test and lab: makes .venv/ with requirements.txt and attncore installed.
# Re-installs only when requirements.txt or pyproject.toml changed since the last set-up.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

pick_python() {
  for p in python3.11 python3.12 python3.10 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
       "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
      echo "$p"; return
    fi
  done
  echo "error: the course needs Python >= 3.10 (3.11 recommended); none found on PATH" >&2
  exit 1
}

quiet_pip() {
  # This workplace's pip configuration prints a warning per package for local index
  # folders it ignores; keep the log readable, keep pip's exit status.
  "$PY" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

stamp_now="$(cat "$ROOT/requirements.txt" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$PY" ]; then
  echo "== creating virtual environment .venv/"
  "$(pick_python)" -m venv "$VENV"
fi
if [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$stamp_now" ]; then
  echo "== installing requirements.txt into .venv/ (first run takes a few minutes)"
  quiet_pip install -q --upgrade pip
  quiet_pip install -q -r "$ROOT/requirements.txt"
  quiet_pip install -q --no-deps -e "$ROOT"
  echo "$stamp_now" > "$VENV/.requirements.sha256"
fi
export PATH="$VENV/bin:$PATH"
