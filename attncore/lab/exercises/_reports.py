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


def report_verdict(report: Any, success: str) -> Verdict:
    """``Verdict(True, success)`` if every property held, else one naming those that
    failed; the report's lines as details either way."""
    if report.passed:
        return Verdict(True, success, report_lines(report))
    return Verdict(False, f"{len(report.failed)} of {len(report.results)} properties "
                          f"failed ({', '.join(report.failed)}); the lines below say how and "
                          f"on which input.", report_lines(report))
