"""The certificate: a versioned JSON document of one conformance run and its verdict."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__

SCHEMA_NAME = "pytest-palw.certificate"
SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("certificate.schema.json")
# Tiers whose claims belong to another platform (the Metal hook): skipped, not disqualifying.
NOT_CERTIFIED_HERE = ("metal",)


@dataclass
class CaseResult:
    nodeid: str
    tier: str
    outcome: str = "passed"  # passed | failed | skipped | error
    duration_s: float = 0.0
    reason: str | None = None
    worker: str | None = None

    def update(self, report) -> None:
        self.duration_s += float(report.duration)
        node = getattr(report, "node", None)  # set by xdist in the controller
        if node is not None:
            self.worker = node.gateway.id
        if report.failed:
            self.outcome = "failed" if report.when == "call" else "error"
            self.reason = _first_line(report.longreprtext)
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"
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

    def record(self, report, tier: str) -> None:
        case = self.cases.setdefault(report.nodeid, CaseResult(report.nodeid, tier))
        case.update(report)

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
        counts = {"collected": len(self.cases)}
        for outcome in ("passed", "failed", "error", "skipped"):
            counts[outcome] = sum(1 for c in self.cases.values() if c.outcome == outcome)
        counts["duration_s"] = round((self.finished or 0) - (self.started or 0), 3)
        return counts

    def verdict(self) -> dict:
        reasons = []
        summary = self.summary()
        if not self.cases:
            reasons.append("no conformance case ran")
        if summary["failed"] or summary["error"]:
            reasons.append(f"{summary['failed'] + summary['error']} case(s) failed")
        skipped_tiers: dict[str, list[CaseResult]] = {}
        for case in self.cases.values():
            if case.outcome == "skipped":
                skipped_tiers.setdefault(case.tier, []).append(case)
        for tier, cases in sorted(skipped_tiers.items()):
            if tier in NOT_CERTIFIED_HERE:
                continue  # another platform's claim: listed in the cases, not a verdict reason
            reasons.append(f"{tier.upper()} tier not run: {len(cases)} case(s) skipped ({cases[0].reason})")
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
            "model": self.facts.get("model"),
            "token": self.facts.get("token"),
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
