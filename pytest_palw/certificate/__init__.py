"""The certificate: a versioned JSON document of one conformance run and its verdict."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from pytest_palw import __version__

SCHEMA_NAME = "pytest-palw.certificate"
SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")
# Tiers whose claims belong to another platform (the Metal hook): skipped, not disqualifying.
NOT_CERTIFIED_HERE = ("metal",)


# pytest's own report categories (pytest_report_teststatus), worst first: a case's outcome.
OUTCOMES = ("error", "failed", "xpassed", "skipped", "xfailed", "passed")


@dataclass
class CaseResult:
    nodeid: str
    tier: str
    outcome: str = "incomplete"  # one of OUTCOMES, or incomplete: started but never reported done
    duration_s: float = 0.0
    reason: str | None = None
    worker: str | None = None
    # Each report pytest counted for this case, by its category: pytest's summary line is the sum.
    categories: list[str] = field(default_factory=list)
    started_at: float | None = None  # Unix time the case's setup began (in its worker)
    finished_at: float | None = None  # and its last report ended

    def update(self, report, category: str) -> None:
        self.duration_s += float(report.duration)
        if getattr(report, "start", None) is not None:
            self.started_at = min(self.started_at or report.start, report.start)
            self.finished_at = max(self.finished_at or report.stop, report.stop)
        node = getattr(report, "node", None)  # set by xdist in the controller
        if node is not None:
            self.worker = node.gateway.id
        if category not in OUTCOMES:
            return  # a passing setup or teardown: pytest counts nothing either
        self.categories.append(category)
        if self.outcome != "incomplete" and OUTCOMES.index(self.outcome) <= OUTCOMES.index(category):
            return
        self.outcome = category
        if report.failed:
            self.reason = _first_line(report.longreprtext)
        elif report.skipped:
            self.reason = _skip_reason(report).removeprefix(f"{self.tier.upper()} tier: ")


def _first_line(text: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.lstrip().startswith("E ")]
    return (errors[0] if errors else (lines[-1] if lines else "")).strip()[:500]


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


@dataclass
class Certificate:
    cases: dict[str, CaseResult] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)  # runtime, model, token, fingerprints, ...
    workers: dict[str, dict] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    partial_run: list[str] = field(default_factory=list)  # selection.partial_run_reasons
    interrupted: str | None = None  # why pytest stopped early (Ctrl-C, -x, pytest.exit)

    def record(self, report, tier: str, category: str) -> None:
        """``category``: pytest's own (``pytest_report_teststatus``) for this report."""
        case = self.cases.setdefault(report.nodeid, CaseResult(report.nodeid, tier))
        case.update(report, category)

    def merge_facts(self, facts: dict, worker: str | None = None) -> None:
        if worker:
            self.workers[worker] = facts.get("worker", {})
        for key, value in facts.items():
            if key == "worker":
                continue
            if key in ("fingerprints", "notes", "kernel_infos"):
                merged = self.facts.setdefault(key, {})
                for name, item in value.items():
                    if name in merged and merged[name] != item:
                        merged.setdefault("_conflicts", []).append({name: [merged[name], item]})
                    merged.setdefault(name, item)
            else:
                self.facts.setdefault(key, value)

    # -- verdict -------------------------------------------------------------------
    def summary(self) -> dict:
        """pytest's own counts for the suite's cases (a case passing its call and erroring in
        teardown counts once in each, as pytest counts it), and the cases that never finished."""
        counts = {"collected": len(self.cases)}
        for outcome in ("passed", "failed", "error", "skipped", "xfailed", "xpassed"):
            counts[outcome] = sum(c.categories.count(outcome) for c in self.cases.values())
        counts["incomplete"] = sum(1 for c in self.cases.values() if c.outcome == "incomplete")
        counts["duration_s"] = round((self.finished or 0) - (self.started or 0), 3)
        return counts

    def verdict(self) -> dict:
        reasons = []
        summary = self.summary()
        if not self.cases:
            reasons.append("no conformance case ran")
        if self.interrupted:
            reasons.append(f"the run was interrupted ({self.interrupted}): "
                           f"{summary['incomplete']} started case(s) never finished")
        bad = sum(1 for c in self.cases.values() if c.outcome in ("failed", "error", "xpassed"))
        if bad:
            reasons.append(f"{bad} case(s) failed")
        if summary["xfailed"]:
            reasons.append(f"{summary['xfailed']} case(s) marked xfail: a certified claim cannot be "
                           "expected to fail")
        skipped: dict[tuple[str, str], int] = {}
        for case in self.cases.values():
            if case.outcome == "skipped" and case.tier not in NOT_CERTIFIED_HERE:
                # another platform's claims (Metal) are listed in the cases, not verdict reasons
                key = (case.tier, case.reason or "no reason given")
                skipped[key] = skipped.get(key, 0) + 1
        for (tier, reason), count in sorted(skipped.items()):
            reasons.append(f"{count} {tier.upper()}-tier case(s) not run: {reason}")
        reasons += self.partial_run
        conflicts = self.facts.get("fingerprints", {}).get("_conflicts")
        if conflicts:
            reasons.append(f"workers disagree on fingerprints: {conflicts}")
        return {"certified": not reasons, "reasons": reasons}

    def document(self) -> dict:
        return {
            "schema": SCHEMA_NAME,
            "version": SCHEMA_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "generator": f"pytest-palw {__version__}",
            "verdict": self.verdict(),
            "runtime": self.facts.get("runtime"),
            "device": self.facts.get("device"),
            "pinned_cc": self.facts.get("pinned_cc"),
            "kernel_digest": self.facts.get("kernel_digest"),
            "model": self.facts.get("model"),
            "token": self.facts.get("token"),
            "pytest": self.facts.get("pytest"),
            "discovery": self.facts.get("discovery"),
            "fingerprints": self.facts.get("fingerprints", {}),
            "kernel_infos": self.facts.get("kernel_infos", {}),
            "notes": self.facts.get("notes", {}),
            "workers": self.workers,
            "summary": self.summary(),
            "cases": [vars(c) for c in sorted(self.cases.values(), key=lambda c: c.nodeid)],
        }

    def write(self, path: Path) -> dict:
        document = self.document()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
        return document


def validate(document: dict) -> None:
    """Raise jsonschema.ValidationError unless ``document`` matches the certificate schema."""
    import jsonschema

    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
