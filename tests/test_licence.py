"""The course's licences and how to cite it: LICENSE, CITATION.cff, the landing page's
"How to cite" block, pyproject.toml, the README, the site's footer and the bundle's files
all say the same. (The built pages' footer, the bundle's LICENSE and the PDF's first page
are checked on the site that tests/test_site.py builds.)"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TITLE = "Attention, from the proof up"
CC_BY = "https://creativecommons.org/licenses/by/4.0/"


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def _citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def _bibtex() -> str:
    text = (ROOT / "index.md").read_text()
    m = re.search(r"^## How to cite\n(.*?)^```bibtex\n(.*?)^```", text, re.M | re.S)
    assert m, "index.md has no 'How to cite' section with a bibtex block"
    return m.group(2)


def test_the_licence_file_has_both_full_texts_and_the_third_parties():
    text = (ROOT / "LICENSE").read_text()
    # The MIT licence in full, and the CC BY 4.0 legal code in full (its eight sections).
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert "Creative Commons Attribution 4.0 International Public License" in text
    for n in range(1, 9):
        assert f"Section {n} -- " in text, f"the CC BY 4.0 legal code lacks its section {n}"
    assert CC_BY in text
    for third_party in ("SmolLM2", "all-MiniLM-L6-v2", "Apache License 2.0",
                        "Python Software Foundation", "PSF License Agreement"):
        assert third_party in text, third_party
    for code in ("attncore/", "scripts/", "_ext/", "tests/", "bench/"):
        assert code in text, f"LICENSE does not say under which licence {code} is"
    assert (ROOT / "attncore" / "lab" / "python311_help_topics.LICENSE.txt").is_file()


def test_citation_cff_parses_with_the_required_keys():
    cff = _citation()
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):
        assert cff.get(key), f"CITATION.cff lacks {key}"
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    assert sorted(cff["license"]) == ["CC-BY-4.0", "MIT"]
    assert cff["preferred-citation"]["type"] == "book"


def test_title_authors_and_year_agree_everywhere():
    cff, config, bib = _citation(), _config(), _bibtex()
    year = str(config["copyright"])
    assert cff["title"] == config["title"] == TITLE == cff["preferred-citation"]["title"]
    assert re.search(r"title\s*=\s*\{" + re.escape(TITLE) + r"\}", bib), bib
    assert str(cff["preferred-citation"]["year"]) == year == str(cff["date-released"])[:4]
    assert re.search(r"year\s*=\s*\{" + year + r"\}", bib), bib
    author = cff["authors"][0]["name"]
    assert author == config["author"] and author in bib
    assert cff["version"] in bib
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cff["version"] == pyproject["version"]
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith(TITLE) and f"Copyright (c) {year} {author}" in licence


def test_pyproject_and_readme_name_the_licences():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    readme = (ROOT / "README.md").read_text()
    assert "CC BY 4.0" in readme and "MIT" in readme and "CITATION.cff" in readme


def test_the_footer_the_pdf_and_the_bundle_name_the_licences():
    footer = _config()["html"]["extra_footer"]
    assert "CC BY 4.0" in footer and CC_BY in footer and "MIT" in footer
    sys.path.insert(0, str(ROOT / "_ext"))
    import book_pdf
    import course_bundle

    assert "CC BY 4.0" in book_pdf.LICENCE_LINE and "MIT" in book_pdf.LICENCE_LINE
    readme = course_bundle._readme("00_how_to_use.ipynb")
    assert course_bundle.LICENSE in readme and "CC BY 4.0" in readme and "MIT" in readme
    assert "LICENSE" in (ROOT / "_ext" / "bundle_agents.md").read_text()
