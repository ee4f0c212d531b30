"""What became of one case: the one classification the verdict, the document and the page share.

pytest says how each report of a case went (its category, ``pytest_report_teststatus``); the
certificate records those reports (CaseResult) and, when the verdict is joined, gives every case
one ``CaseState``, once (verdict.case_states). The document states it per case; the page only
displays it, by the state's tone.
"""

from __future__ import annotations

from enum import Enum

# pytest's own report categories (pytest_report_teststatus) for a case's reports; "" is a passing
# setup or teardown. Any other category is an outcome pytest does not name (a rerun plugin's "rerun").
KNOWN_CATEGORIES = ("", "passed", "failed", "error", "skipped", "xfailed", "xpassed")


def category_of(report, status: tuple | None) -> str:
    """pytest's category of one report: the first item of what ``pytest_report_teststatus``
    answered (``status``), or, when no plugin answers (``-p no:terminal``), the one pytest's
    terminal would give."""
    if status:
        return status[0]
    if report.passed:
        return "passed" if report.when == "call" else ""
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped"


class CaseState(str, Enum):
    """What became of one case of the suite: its value is its name, in the document and to a reader.

    ``tone``: the page's class of it (passed, failed, or skipped: not run), which the failure list,
    the launch map and the claims table count."""

    MISSING = "missing"  # never reported
    CRASHED = "crashed"  # its worker died while running it
    FAILED = "failed"  # a phase failed, or pytest counted a failure or an error
    XFAIL = "xfail"  # xfailed or xpassed: a certified claim cannot be expected to fail
    SKIPPED = "skipped"
    SWAPPED = "swapped"  # a plugin fixture's value was not the plugin's
    RETRIED = "retried"  # its body was entered more than once, or raised in its call
    UNKNOWN = "unknown"  # a report of a category pytest does not name
    BODY_NOT_REACHED = "body not reached"  # no call reported: setup only (--setup-only, --setup-plan)
    BODY_NOT_WITNESSED = "body not witnessed"  # a call passed, and the witness does not name this case
    INCOMPLETE = "incomplete"  # its body ran to its end, and its teardown never reported
    PASSED = "passed"

    @property
    def tone(self) -> str:
        return _TONES[self]

    @classmethod
    def of(cls, case, case_id: str) -> CaseState:
        """The state of the recorded case ``case`` (a CaseResult; None: never reported) of id ``case_id``."""
        if case is None:
            return cls.MISSING
        if case.crashed:
            return cls.CRASHED
        if any(outcome == "failed" for outcome in case.phases.values()):
            return cls.FAILED
        categories = set(case.categories) | {case.outcome}
        if categories & {"failed", "error"}:
            return cls.FAILED
        if categories & {"xfailed", "xpassed"}:
            return cls.XFAIL
        if "skipped" in case.phases.values():
            return cls.SKIPPED
        if case.swapped:
            return cls.SWAPPED
        if (case.entries or 0) > 1 or case.raised:  # entries None: a certificate older than the count
            return cls.RETRIED
        if case.unknown:
            return cls.UNKNOWN
        if case.phases.get("setup") != "passed" or "call" not in case.phases:
            return cls.BODY_NOT_WITNESSED if "call" in case.phases else cls.BODY_NOT_REACHED
        if case.phases["call"] != "passed" or case.body != case_id:  # the witness names the case that ran
            return cls.BODY_NOT_WITNESSED
        if case.phases.get("teardown") != "passed":
            return cls.INCOMPLETE
        return cls.PASSED


# The page's tone is pytest's view of the case: a body pytest passed is green even where the verdict
# refuses it (the verdict's reasons say why), a case that never reached its body is "not run".
_TONES = {CaseState.MISSING: "skipped", CaseState.CRASHED: "failed", CaseState.FAILED: "failed",
          CaseState.XFAIL: "failed", CaseState.SKIPPED: "skipped", CaseState.SWAPPED: "passed",
          CaseState.RETRIED: "passed", CaseState.UNKNOWN: "passed", CaseState.BODY_NOT_REACHED: "skipped",
          CaseState.BODY_NOT_WITNESSED: "passed", CaseState.INCOMPLETE: "passed", CaseState.PASSED: "passed"}
