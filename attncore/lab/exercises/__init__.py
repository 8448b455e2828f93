"""Self-checks for the chapters' exercises, that never show the answer.

An exercise that is answered with code has one cell in its chapter: the reader's answer, which
starts as ``None``, and one call of :func:`check_exercise` with the exercise's label::

    # Your answer: replace None, then run this cell.
    my_threshold = None

    check_exercise("ex-sqrt-dk-threshold", my_threshold)

The call prints one line: "Not answered yet ..." while any answer is ``None`` (this is what the
stored notebook shows, so it gives nothing away), "Correct ..." or "Not yet ...", with a hint
that does not contain the answer. It also returns what it printed as a :class:`Checked`
(which a notebook displays as nothing, so that the cell shows only the printed lines), and
remembers the latest one of each exercise (:func:`checked_exercises`), which the class grader
(``python -m attncore.grade``) reads. The checkers compute what they compare with from first
principles, in the module of their chapter (``attncore/lab/exercises/<chapter>.py``); the
course's tests feed each of them a right and a wrong answer.

A checker is a function of the answers that returns a :class:`Verdict`, registered under the
exercise's label with :func:`exercise`.
"""

from __future__ import annotations

import importlib
import math
import numbers
import pkgutil
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Checked", "Verdict", "check_exercise", "checked_exercises", "exercise",
           "registered_exercises", "report_verdict"]

NOT_ANSWERED = "Not answered yet: replace None with your answer, then run this cell again."
WIDTH = 80


@dataclass(frozen=True)
class Verdict:
    """A checker's answer: ``correct`` and what to tell the reader.

    ``message`` is printed after "Correct." or "Not yet:"; it must not contain the right
    answer. ``details`` are further lines (one per part of a several-part answer).
    """

    correct: bool
    message: str = ""
    details: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Checked:
    """What :func:`check_exercise` printed, as data.

    ``status`` is ``"not answered"``, ``"passed"`` or ``"failed"``; ``message`` is the
    checker's hint (empty while not answered) and ``details`` its further lines. A notebook
    cell whose last line is ``check_exercise(...)`` shows only the printed lines: the object
    displays as nothing in IPython (``_ipython_display_``).
    """

    label: str
    status: str
    message: str = ""
    details: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def _ipython_display_(self) -> None:
        # The verdict is already printed; displaying the object again would add an output.
        return None


_CHECKERS: dict[str, Callable[..., Verdict]] = {}
# The latest verdict of each exercise checked in this Python process (label -> Checked).
_CHECKED: dict[str, Checked] = {}


def real_answer(name: str, value: Any) -> float:
    """A checker's reading of a one-number answer: ``value`` as a finite float.

    A bool or a non-number is a TypeError, an infinite or NaN number a ValueError, both
    naming the answer ``name``, so that a malformed answer is never judged wrong silently.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} should be a finite number, got {value}")
    return value


def exercise(label: str) -> Callable[[Callable[..., Verdict]], Callable[..., Verdict]]:
    """Register the decorated function as the checker of the exercise labelled ``label``.

    ``label`` is the exercise's label in its chapter (the ``<!-- label: ... -->`` comment of
    its ``{exercise}`` directive); each label is registered once.
    """
    def register(checker: Callable[..., Verdict]) -> Callable[..., Verdict]:
        if label in _CHECKERS:
            raise ValueError(f"label: the exercise {label!r} already has a checker")
        _CHECKERS[label] = checker
        return checker

    return register


def _load_all() -> None:
    # Each chapter's checkers live in their own module and register themselves on import.
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def registered_exercises() -> list[str]:
    """The labels of every exercise that has a checker, sorted."""
    _load_all()
    return sorted(_CHECKERS)


def checked_exercises() -> dict[str, Checked]:
    """The latest :class:`Checked` of every exercise checked in this process, by label."""
    return dict(_CHECKED)


def check_exercise(label: str, *answers: Any) -> Checked:
    """Check the reader's answer(s) to the exercise ``label`` and print one verdict.

    Parameters
    ----------
    label : str
        The exercise's label, e.g. ``"ex-sqrt-dk-threshold"``.
    *answers
        The reader's answers, in the order the exercise asks for them. While any of them is
        ``None`` the exercise counts as not answered yet.

    Returns
    -------
    Checked
        The verdict as data (``status`` ``"not answered"``, ``"passed"`` or ``"failed"``),
        also remembered for :func:`checked_exercises`. It displays as nothing in a notebook.

    Prints ``Not answered yet: ...``, ``Correct. ...`` or ``Not yet: ...`` (plus one line per
    part for several-part answers): the only output a notebook cell shows.
    """
    _load_all()
    if label not in _CHECKERS:
        raise ValueError(f"label: no exercise is labelled {label!r}; known labels: "
                         f"{', '.join(sorted(_CHECKERS))}")
    if not answers or any(a is None for a in answers):
        print(NOT_ANSWERED)
        _CHECKED[label] = Checked(label, "not answered")
        return _CHECKED[label]
    try:
        verdict = _CHECKERS[label](*answers)
    except Exception as err:  # a reader's answer of the wrong kind is feedback, not a crash
        verdict = Verdict(False, f"checking your answer raised {type(err).__name__}: {err}")
    head = "Correct." if verdict.correct else "Not yet:"
    # Short lines, so that the verdict shows whole in the book's content column.
    print(textwrap.fill(f"{head} {verdict.message}".rstrip(), WIDTH))
    for line in verdict.details:
        print(textwrap.fill(line, WIDTH, initial_indent="  ", subsequent_indent="    "))
    _CHECKED[label] = Checked(label, "passed" if verdict.correct else "failed",
                              verdict.message, tuple(verdict.details))
    return _CHECKED[label]


# one home for turning a conformance report into a verdict (imported last: it needs Verdict)
from ._reports import report_verdict  # noqa: E402
