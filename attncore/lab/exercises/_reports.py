"""A conformance report as an exercise's verdict: one line per property, the failing ones
with how and on which input (never the expected values)."""

from __future__ import annotations

from typing import Any

from . import Verdict

_MARK = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}


def report_lines(report: Any) -> tuple[str, ...]:
    """One line per property of a :class:`~attncore.testing.CheckReport`."""
    return tuple(f"{_MARK[r.status]} {r.name}" + (f": {r.detail}" if r.detail else "")
                 + (f" (on {r.input})" if r.status == "failed" and r.input else "")
                 for r in report.results)


def report_verdict(report: Any, praise: str, *, call: str | None = None) -> Verdict:
    """The verdict on a build-it exercise from its conformance check's report
    (:class:`attncore.testing.CheckReport`; a report never holds the right answer's values).

    ``praise`` is the message when every property holds. A failure names the properties that
    failed; with ``call``, the expression that prints the report in full
    (``"ac.testing.check_merge(my_merge)"``), the details are the first failure's finding and
    input and the message says to print the report for the rest; without it, the details are
    the report's lines, one per property, also on success.
    """
    failed = (f"{len(report.failed)} of {len(report.results)} properties failed "
              f"({', '.join(report.failed)})")
    if call is None:
        if report.passed:
            return Verdict(True, praise, report_lines(report))
        return Verdict(False, f"{failed}; the lines below say how and on which input.",
                       report_lines(report))
    if report.passed:
        return Verdict(True, praise)
    first = report[report.failed[0]]
    details = (f"{first.name}: {first.detail}",) + ((f"on {first.input}",) if first.input
                                                    else ())
    return Verdict(False, f"{failed}; print({call}) shows each one.", details)
