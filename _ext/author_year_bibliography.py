"""Bibliography entries labelled the way the text cites them: "Vaswani et al., 2017".

The chapters cite author-year (``bibtex_reference_style: author_year``), but pybtex's styles
label the bibliography's entries alphabetically ("VSP+17"), so a reader who follows a citation
finds a different label. This extension registers the pybtex style ``author_year_labels``:
pybtex's ``unsrt`` formatting, sorted by author, year and title, with author-year labels
(one author: "Ba, 2016"; two: "Rabe and Staats, 2021"; more: "Vaswani et al., 2017"; a letter
after the year where two entries would share a label).
"""

from __future__ import annotations

import re
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx

STYLE = "author_year_labels"


def _last_name(person) -> str:
    name = " ".join(person.prelast_names + person.last_names)
    # BibTeX braces and accent commands ({\L}ukasz, {\'e}) are not part of the label.
    name = re.sub(r"\\[a-zA-Z]+\s*|\\.", "", name)
    return name.replace("{", "").replace("}", "")


def author_year(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    year = entry.fields.get("year", "n.d.")
    if not persons:
        return f"{entry.fields.get('title', entry.key)}, {year}"
    if len(persons) == 1:
        who = _last_name(persons[0])
    elif _last_name(persons[-1]) == "others":   # BibTeX's "and others": et al.
        who = f"{_last_name(persons[0])} et al."
    elif len(persons) == 2:
        who = f"{_last_name(persons[0])} and {_last_name(persons[1])}"
    else:
        who = f"{_last_name(persons[0])} et al."
    return f"{who}, {year}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:     # "Dao et al., 2022a", "Dao et al., 2022b"
                seen[label] += 1
                label += "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            yield label


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabelStyle
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.formatting", STYLE, AuthorYearStyle)


def setup(app: Sphinx) -> dict:
    return {"parallel_read_safe": True, "parallel_write_safe": True}
