"""The GitHub workflow (.github/workflows/book.yml), read offline: every script it runs is in
the repository, its Python matrix is the oldest and the newest Python that pyproject.toml
declares, each job may run at least twice the suite's last measured time, and no step
installs a browser from a snap (a snap's /tmp is private: the headless checks open pages
written under /tmp)."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
sys.path.insert(0, str(ROOT / "_ext"))

import browser  # noqa: E402


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps():
    for name, job in workflow()["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


def scripts_run(command: str) -> list[str]:
    """The repository paths a shell command runs or reads (``./scripts/test``,
    ``python3 scripts/set-repository ...``, ``source scripts/_setup.sh``)."""
    words = []
    for line in command.splitlines():
        try:
            words += shlex.split(line, comments=True)
        except ValueError:
            words += line.split()
    found = []
    for word in words:
        for part in re.split(r"[\s'\";]+", word):
            if re.match(r"^(\./)?(scripts|_ext|bench|tests|\.ci)/[\w./-]+$", part):
                found.append(part.removeprefix("./"))
    return found


def test_every_script_the_workflow_runs_exists():
    runs = [(job, path) for job, step in steps() for path in scripts_run(step.get("run", ""))]
    assert runs, "the workflow runs no script of the repository"
    missing = [(job, path) for job, path in runs if not (ROOT / path).exists()]
    assert not missing, f"the workflow runs scripts that are not in the repository: {missing}"


def test_script_finder_sees_what_it_should():
    assert scripts_run("./scripts/test") == ["scripts/test"]
    assert scripts_run("python3 scripts/set-repository \"$URL\"") == ["scripts/set-repository"]
    assert scripts_run("bash -c 'source scripts/_setup.sh'") == ["scripts/_setup.sh"]
    assert scripts_run("echo hello  # scripts/x in a comment") == []


def declared_pythons() -> tuple[str, str]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = re.search(r">=\s*3\.(\d+)", spec)
    high = re.search(r"<\s*3\.(\d+)", spec)
    assert low and high, f"requires-python {spec!r}: expected '>=3.A,<3.B'"
    return f"3.{low.group(1)}", f"3.{int(high.group(1)) - 1}"


def test_python_matrix_is_the_oldest_and_newest_declared():
    oldest, newest = declared_pythons()
    matrices = [job["strategy"]["matrix"]["python-version"]
                for job in workflow()["jobs"].values() if "strategy" in job]
    assert matrices, "no job runs a matrix of Pythons"
    for versions in matrices:
        assert [str(v) for v in versions] == [oldest, newest], \
            f"matrix {versions}: expected the oldest and newest of requires-python, " \
            f"{[oldest, newest]}"


def last_suite_seconds() -> int:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    found = re.findall(r"<!-- suite-wall-seconds: (\d+) -->", text)
    assert len(found) == 1, "CONTRIBUTING.md: expected one suite-wall-seconds marker"
    return int(found[0])


def test_each_job_may_run_twice_the_suites_last_measured_time():
    need = 2 * last_suite_seconds() / 60
    for name, job in workflow()["jobs"].items():
        if "steps" not in job or name == "deploy":
            continue
        assert job.get("timeout-minutes", 360) >= need, \
            f"job {name}: timeout-minutes {job.get('timeout-minutes')} is less than twice " \
            f"the suite's last measured time ({need:.0f} min)"


def test_no_step_installs_a_browser_from_a_snap():
    for job, step in steps():
        run = step.get("run", "")
        code = "\n".join(line.split("#", 1)[0] for line in run.splitlines())
        assert "snap install" not in code and "snap " not in code.replace("snapshot", ""), \
            f"job {job}: a step installs from a snap: {run!r}"


def test_the_workflow_names_the_runners_browser_for_the_checks():
    env = workflow()["jobs"]["test-and-build"].get("env", {})
    assert env.get(browser.ENV) == "google-chrome"


# --- the browser lookup (_ext/browser.py) -----------------------------------------------

def fake_program(folder: Path, name: str, prints: str, sleep: float = 0) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + (f"sleep {sleep}\n" if sleep else "") +
                    f"echo {shlex.quote(prints)}\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="shell scripts stand in for browsers")
def test_the_variable_comes_first_and_is_checked(tmp_path, monkeypatch):
    chrome = fake_program(tmp_path, "chrome", "Google Chrome 131.0.6778.85")
    monkeypatch.setenv(browser.ENV, str(chrome))
    assert browser.find_browser() == str(chrome)
    monkeypatch.setenv(browser.ENV, str(tmp_path / "missing"))
    with pytest.raises(browser.BrowserNotFound, match=r"ATTNCORE_BROWSER=.*missing.*: no such "
                                                      r"file"):
        browser.find_browser()
    monkeypatch.setenv(browser.ENV, str(tmp_path))
    with pytest.raises(browser.BrowserNotFound, match="a folder"):
        browser.find_browser()
    not_a_browser = fake_program(tmp_path, "firefox", "Mozilla Firefox 133.0")
    monkeypatch.setenv(browser.ENV, str(not_a_browser))
    with pytest.raises(browser.BrowserNotFound, match=r"printed 'Mozilla Firefox 133.0', not a "
                                                      r"Chromium-family browser"):
        browser.find_browser()
    hangs = fake_program(tmp_path, "hangs", "Chromium 1", sleep=60)
    monkeypatch.setenv(browser.ENV, str(hangs))
    monkeypatch.setattr(browser, "VERSION_TIMEOUT_S", 1.0)
    with pytest.raises(browser.BrowserNotFound, match="did not answer in 1 s"):
        browser.find_browser()                    # never a hang


@pytest.mark.skipif(sys.platform == "win32", reason="shell scripts stand in for browsers")
def test_the_names_are_tried_in_order_and_the_error_says_what_was_tried(tmp_path,
                                                                        monkeypatch):
    monkeypatch.delenv(browser.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(browser, "MACOS", (str(tmp_path / "Google Chrome.app"),))
    with pytest.raises(browser.BrowserNotFound) as info:
        browser.find_browser()
    for name in ("chromium-headless-shell", "chrome-headless-shell", "chromium",
                 "chromium-browser", "google-chrome", "google-chrome-stable",
                 "ATTNCORE_BROWSER"):
        assert name in str(info.value)
    fake_program(tmp_path, "google-chrome-stable", "Google Chrome 131")
    assert browser.find_browser().endswith("google-chrome-stable")
    fake_program(tmp_path, "chromium-browser", "Chromium 130")
    assert browser.find_browser().endswith("chromium-browser")
    # a headless shell comes before every browser
    fake_program(tmp_path, "chrome-headless-shell", "Google Chrome for Testing 131")
    assert browser.find_browser().endswith("chrome-headless-shell")
    fake_program(tmp_path, "chromium-headless-shell", "Chromium 130")
    assert browser.find_browser().endswith("chromium-headless-shell")
    assert browser.browser_or_none()[1] == ""
