"""The book's pages that chapters link to, as notebooks for the course bundle.

A chapter links to pages of the book that are not notebooks: the proofs appendix
(``../appendix/proofs.md``), the performance page (``../performance.md``). The bundle is a
folder of notebooks opened in JupyterLab, VS Code or any notebook viewer, with no Sphinx to
build those pages, so it ships each linked page as a notebook beside the chapters
(``appendix/proofs.ipynb``, ``performance.ipynb``) and points the links there:

- ``bundle_path`` says where a file of the repository lies in the bundle (chapters at the
  top, a page ``P.md`` as ``P.ipynb``);
- ``rewrite_links`` points a notebook's markdown links at those places;
- ``page_notebook`` turns a page's MyST markdown into a notebook that reads right without
  Sphinx: one markdown cell per section, directives with colon fences (JupyterLab with
  jupyterlab-myst draws their boxes, other frontends show readable paragraphs), ``{include}``
  inlined, a ``{figure}`` as an image attached to its cell with its caption below, a
  ``{doc}`` reference as a link, a ``{prf:ref}`` as the text of what it names, and labels
  and admonitions written as in the chapters (scripts/portable_markdown.py).

``linked_pages`` follows the links from the chapters, and from those pages on, so that
every page reached is shipped. A directive it cannot render without Sphinx stops the build
with its name. The standard library only (and scripts/portable_markdown.py, which is too).
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import portable_markdown  # noqa: E402

CHAPTERS = "chapters"
# [text](target) in markdown, and the target of an HTML link or image
LINK = re.compile(r"(\]\()([^)\s]+)(\))|(\b(?:href|src)=\")([^\"]+)(\")")
FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{[\w:-]+\})?\s*(.*)$")
# Directives a notebook frontend can show from colon fences (jupyterlab-myst draws them,
# others show the text): anything else has no meaning outside Sphinx.
SHOWN = re.compile(r"^(prf:\w+|admonition|note|tip|warning|important|caution|seealso|math)$")


def is_relative(target: str) -> bool:
    """Whether a link target is a path inside the book (not a URL, an anchor or mail)."""
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target, re.I)


def bundle_path(repo_path: str) -> str:
    """Where the file at ``repo_path`` (relative to the repository, POSIX) lies in the
    bundle: a chapter at the top, a page ``P.md`` as ``P.ipynb``, anything else as is."""
    if repo_path.startswith(CHAPTERS + "/") and repo_path.endswith(".ipynb"):
        return repo_path[len(CHAPTERS) + 1:]
    if repo_path.endswith(".md"):
        return repo_path[:-3] + ".ipynb"
    return repo_path


def _resolve(source: str, target: str) -> tuple[str, str]:
    """The repository path a relative link of the file ``source`` names, and its anchor."""
    path, _, anchor = target.partition("#")
    if not path:
        return source, anchor
    return posixpath.normpath(posixpath.join(posixpath.dirname(source), path)), anchor


def _relink(source: str, target: str) -> str:
    """``target``, a link written in the repository's file ``source``, for the bundle."""
    if not is_relative(target):
        return target
    path, anchor = _resolve(source, target)
    if path == source:
        return target
    new = posixpath.relpath(bundle_path(path), posixpath.dirname(bundle_path(source)) or ".")
    return new + (f"#{anchor}" if anchor else "")


# Code, where nothing is a link: fenced blocks (not directives, whose info string starts
# with "{") and inline code spans.
CODE = re.compile(r"^(`{3,}|~{3,})(?!\s*\{).*?^\1[ \t]*$|(`+)[^`].*?\2", re.M | re.S)


def _prose(text: str, change) -> str:
    """``text`` with ``change`` applied to the parts that are not code."""
    out, at = [], 0
    for m in CODE.finditer(text):
        out += [change(text[at:m.start()]), m.group(0)]
        at = m.end()
    return "".join(out + [change(text[at:])])


def rewrite_links(text: str, source: str) -> str:
    """The markdown ``text`` of the repository's file ``source`` with every relative link
    pointing where its target lies in the bundle (code left as it is)."""
    def sub(m: re.Match) -> str:
        if m.group(1):
            return m.group(1) + _relink(source, m.group(2)) + m.group(3)
        return m.group(4) + _relink(source, m.group(5)) + m.group(6)
    return _prose(text, lambda part: LINK.sub(sub, part))


def markdown_links(text: str) -> list[str]:
    """Every link target of a markdown text (markdown links, HTML href and src), code
    left out."""
    found: list[str] = []
    _prose(text, lambda part: found.extend(m.group(2) or m.group(5)
                                           for m in LINK.finditer(part)) or part)
    return found


def notebook_markdown(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def linked_pages(root: Path, chapters: list[Path]) -> list[str]:
    """The repository paths of the ``.md`` pages the chapters link to, and the pages those
    link to, in the order found."""
    found: list[str] = []
    todo = [(f"{CHAPTERS}/{p.name}", "\n".join(notebook_markdown(json.loads(p.read_text()))))
            for p in chapters]
    while todo:
        source, text = todo.pop(0)
        docs = [f"{t}.md" for t in _doc_targets(text)]     # a {doc} names a page or a notebook
        links = markdown_links(text) + [t for t in docs
                                        if (root / _resolve(source, t)[0]).is_file()]
        for target in filter(is_relative, links):
            path, _ = _resolve(source, target)
            if path.endswith(".md") and path not in found:
                if not (root / path).is_file():
                    raise FileNotFoundError(f"{source} links to {target}: no such page")
                found.append(path)
                todo.append((path, (root / path).read_text()))
    return found


def _doc_targets(text: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"\{doc\}`(?:([^`<]*?)\s*<)?([^`>]+)>?`", text)]


# --- a page as a notebook ----------------------------------------------------------------------

def _title_of(root: Path, repo_path: str) -> str:
    """The first heading of a chapter notebook or a page."""
    path = root / repo_path
    text = ("\n".join(notebook_markdown(json.loads(path.read_text())))
            if path.suffix == ".ipynb" else path.read_text())
    m = re.search(r"^# (.+)$", text, re.M)
    return m.group(1).strip() if m else Path(repo_path).stem


def _labels(text: str) -> dict[str, str]:
    """label -> "the lemma *Title*" for the labelled directives of a page."""
    out = {}
    for m in re.finditer(r"^[`:]{3,}\s*\{prf:(\w+)\}\s*(.*)\n:label:\s*(\S+)", text, re.M):
        kind, title, label = m.groups()
        out[label] = f"the {kind} *{title.strip()}*" if title.strip() else f"the {kind}"
    return out


def _roles(text: str, root: Path, source: str, labels: dict[str, str]) -> str:
    def doc(m: re.Match) -> str:
        shown, target = m.group(1), m.group(2)
        path = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        path = path + ".md" if (root / (path + ".md")).is_file() else path + ".ipynb"
        link = posixpath.relpath(bundle_path(path), posixpath.dirname(bundle_path(source)))
        return f"[{shown or _title_of(root, path)}]({link})"

    def ref(m: re.Match) -> str:
        shown, label = m.group(1), m.group(2)
        if shown:
            return shown
        if label not in labels:
            raise ValueError(f"{source}: {{prf:ref}} to {label!r}, which it does not define")
        return labels[label]

    text = re.sub(r"\{doc\}`(?:([^`<]*?)\s*<)?([^`>]+)>?`", doc, text)
    return re.sub(r"\{prf:ref\}`(?:([^`<]*?)\s*<)?([^`>]+)>?`", ref, text)


def _figure(root: Path, source: str, argument: str, body: list[str],
            attachments: dict) -> list[str]:
    """A ``{figure}`` directive as an image attached to the cell, its caption below."""
    options = {}
    while body and body[0].startswith(":"):
        key, _, value = body.pop(0)[1:].partition(":")
        options[key.strip()] = value.strip()
    image = root / posixpath.dirname(source) / argument
    name = image.name
    attachments[name] = {"image/png": base64.b64encode(image.read_bytes()).decode()}
    caption = " ".join(line.strip() for line in body if line.strip())
    alt = options.get("alt", caption).replace("]", ")").replace("[", "(")
    return [f"![{alt}](attachment:{name})", "", f"*{caption}*" if caption else ""]


def _closing(lines: list[str], start: int, fence: str) -> int:
    return next(j for j in range(start + 1, len(lines)) if lines[j].strip() == fence)


def _cells_of(text: str, root: Path, source: str) -> list[dict]:
    """Markdown cells of a page's text: directives converted, one cell per section."""
    lines = text.splitlines()
    out: list[tuple[str, bool]] = []           # (line, whether a section may start there)
    attachments: dict = {}
    stack: list[tuple[str, str]] = []          # open fences: (what opened it, what closes it)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m and stack and line.strip() == stack[-1][0]:
            out.append((stack.pop()[1], False))    # the closing fence of a directive
        elif m and m.group(2) and m.group(1)[0] == "`":
            fence, name, argument = m.group(1), m.group(2)[1:-1], m.group(3)
            if name == "include":
                end = _closing(lines, i, fence)
                included = root / posixpath.dirname(source) / argument
                out.extend((x, False) for x in _roles(included.read_text(), root, source,
                                                      {}).splitlines())
                i = end
            elif name == "figure":
                end = _closing(lines, i, fence)
                out.extend((x, False) for x in _figure(root, source, argument,
                                                       lines[i + 1:end], attachments))
                i = end
            elif SHOWN.match(name):
                colons = ":" * len(fence)
                out.append((f"{colons}{{{name}}} {argument}".rstrip(), False))
                stack.append((fence, colons))
            else:
                raise ValueError(f"{source}: the directive {{{name}}} has no meaning "
                                 "outside Sphinx; the course bundle cannot ship this page")
        elif m and m.group(1)[0] == "`" and not stack:
            # a code block: copied whole, nothing inside it is a directive or a heading
            end = _closing(lines, i, m.group(1))
            out.extend((x, False) for x in lines[i:end + 1])
            i = end
        else:
            out.append((line, not stack))
        i += 1
    cells: list[list[str]] = []
    current: list[str] = []
    for line, may_start in out:
        if may_start and re.match(r"^#{1,2} ", line) and any(x.strip() for x in current):
            cells.append(current)
            current = []
        current.append(line)
    cells.append(current)
    result = []
    for cell in cells:
        source_text = "\n".join(cell).strip("\n")
        used = {n: a for n, a in attachments.items() if f"attachment:{n}" in source_text}
        result.append({"cell_type": "markdown", "metadata": {},
                       "source": source_text.splitlines(keepends=True),
                       **({"attachments": used} if used else {})})
    return result


def page_notebook(root: Path, repo_path: str) -> dict:
    """The page at ``repo_path`` (MyST markdown) as a notebook for the bundle."""
    text = (root / repo_path).read_text()
    text = _roles(text, root, repo_path, _labels(text))
    cells = _cells_of(text, root, repo_path)
    for cell in cells:
        cell["source"] = rewrite_links("".join(cell["source"]),
                                       repo_path).splitlines(keepends=True)
    for i, cell in enumerate(cells):
        cell["id"] = f"page-{i}"
    # The chapters' kernel, so that JupyterLab opens the page as it is (not marked changed).
    metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                               "name": "python3"},
                "language_info": {"name": "python"}}
    nb = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    # labels as HTML comments and admonitions named by their class, as in the chapters, so
    # that a frontend without MyST shows no ":label:" line (scripts/portable_markdown.py)
    return portable_markdown.convert_notebook(nb)


def dump(nb: dict) -> str:
    """A notebook as Jupyter writes it."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def chapter_for_bundle(path: Path) -> bytes:
    """A chapter notebook as the bundle ships it: as stored, its links to pages and other
    files pointing where they lie in the bundle (bytes unchanged where no link moves)."""
    raw = path.read_text()
    nb = json.loads(raw)
    source = f"{CHAPTERS}/{path.name}"
    changed = False
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        new = rewrite_links(text, source)
        if new != text:
            cell["source"] = new.splitlines(keepends=True)
            changed = True
    if not changed:
        return raw.encode()
    return dump(nb).encode()
