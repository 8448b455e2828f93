"""The website built with a repository named (scripts/set-repository, as a fork's GitHub Pages
workflow does): every chapter has its launch buttons, the bundle and the notebooks name the
repository, and the landing page and chapter 0 say how to use it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from built_site import (LAUNCH_BUTTONS, REPOSITORY_ONLY, ROOT, chapter_pages,
                        check_the_bundle, promises)


@pytest.fixture(scope="module")
def site_with_repository(tmp_path_factory) -> tuple[Path, Path, str]:
    """The book built from a copy of this checkout in which `scripts/set-repository` named a
    repository: the build a fork's GitHub Pages workflow makes (the one extra build)."""
    import os
    import shutil
    import sys

    url = "https://github.com/someone/attention-fork"
    copy = tmp_path_factory.mktemp("with-repository") / "course"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.split(b"\0")):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (copy / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / os.fsdecode(name))
    proc = subprocess.run([sys.executable, str(copy / "scripts" / "set-repository"), url],
                          cwd=copy, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The flags of scripts/build-book, whose set-up the copy would repeat.
    env = {**os.environ, "PYTHONPATH": str(copy)}
    proc = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", "--all",
                           "--warningiserror", "--keep-going", "--quiet", str(copy)],
                          cwd=copy, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=1500)
    if proc.returncode != 0:
        pytest.fail(f"the book build with a repository failed:\n{proc.stdout[-6000:]}")
    return copy / "_build" / "html", copy, url


def test_with_a_repository_every_chapter_has_launch_buttons_and_the_bundle(site_with_repository):
    site, copy, url = site_with_repository
    owner_repo = "/".join(url.split("/")[-2:])
    for page in chapter_pages(site):
        text = page.read_text()
        shown = [b for b in LAUNCH_BUTTONS if b in text]
        assert shown == list(LAUNCH_BUTTONS), f"{page.name} shows only {shown}"
        assert f"mybinder.org/v2/gh/{owner_repo}/" in text, page.name
        assert f"colab.research.google.com/github/{owner_repo}/blob/" in text, page.name
        assert f'href="{url}"' in text, page.name
    check_the_bundle(site, copy)
    # The notebooks of the site and of the bundle install from the repository when alone.
    for nb in (site / "_sources" / "chapters").glob("*.ipynb"):
        assert f'REPOSITORY = \\"{url}\\"' in nb.read_text(), nb.name



def test_with_a_repository_the_landing_page_and_chapter_0_say_how_to_use_it(
        site_with_repository):
    site, copy, url = site_with_repository
    texts = promises(site)
    for name, text in texts.items():
        missing = [w for w in ("rocket", "./scripts/lab") if w not in text]
        assert not missing, f"{name} does not mention {missing} although {url} is named"
    # the theme shows a GitHub link by its owner/name; it links the whole address
    assert "/".join(url.split("/")[-2:]) in texts["chapters/00_how_to_use.html"]
    assert f'href="{url}"' in (site / "chapters" / "00_how_to_use.html").read_text()

