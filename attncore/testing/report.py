"""The report every conformance check of :mod:`attncore.testing` returns.

A check runs a list of named properties on a function the learner wrote; each property
ends as one :class:`PropertyResult` (passed, failed with what went wrong and on which
input, or skipped with why), and the check returns them together as a :class:`CheckReport`,
whose ``str`` is a summary of short lines that never contains the right answer.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

__all__ = ["PropertyResult", "CheckReport"]


@dataclass(frozen=True)
class PropertyResult:
    """The outcome of one property.

    Attributes
    ----------
    name : str
        The property's name, a key of the check's ``PROPERTIES``.
    status : {"passed", "failed", "skipped"}
    detail : str
        What went wrong (or why it was skipped); empty when it passed.
    input : str
        The smallest input it failed on: shapes, flags and seed.
    """

    name: str
    status: str
    detail: str = ""
    input: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class CheckReport:
    """What one conformance check found: one :class:`PropertyResult` per property.

    ``str(report)`` is a summary of short lines; ``report[name]`` is one result;
    ``report.passed`` is True when no property failed.

    Attributes
    ----------
    function : str
        The name of the function checked.
    results : tuple of PropertyResult
        In the order the check runs its properties.
    check : str
        The check's name, e.g. ``"check_softmax"``.
    """

    function: str
    results: tuple[PropertyResult, ...]
    check: str = "check"

    @property
    def passed(self) -> bool:
        """True if no property failed (skipped ones do not count as failures)."""
        return not self.failed

    @property
    def failed(self) -> list[str]:
        """Names of the properties that failed."""
        return [r.name for r in self.results if r.status == "failed"]

    def __getitem__(self, name: str) -> PropertyResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"name: expected one of {[r.name for r in self.results]}, "
                       f"got {name!r}")

    def summary(self, width: int = 80) -> str:
        """The report as lines of at most ``width`` characters."""
        counts = {s: sum(r.status == s for r in self.results)
                  for s in ("passed", "failed", "skipped")}
        lines = [f"{self.check}({self.function}): {counts['passed']} passed, "
                 f"{counts['failed']} failed, {counts['skipped']} skipped"]
        mark = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}
        for r in self.results:
            head = f"  {mark[r.status]}  {r.name}"
            if r.detail:
                head += f": {r.detail}"
            lines += textwrap.wrap(head, width, subsequent_indent=" " * 8)
            if r.status == "failed" and r.input:
                lines += textwrap.wrap(f"on {r.input}", width, initial_indent=" " * 8,
                                       subsequent_indent=" " * 8)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with the summary if any property failed."""
        if not self.passed:
            raise AssertionError("\n" + self.summary())
