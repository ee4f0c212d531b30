"""The certificate: a versioned JSON document of one conformance run and its verdict.

Built once, in the controlling process, when the session finishes (``Certificate.finish``): the
expected inventory, every case's reports, the facts the workers sent, the verdict (verdict.py).
The terminal summary, the JSON file and the HTML page all render that one document.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_palw import __version__
from pytest_palw.certificate.state import KNOWN_CATEGORIES, CaseState
from pytest_palw.certificate.verdict import RunFacts, case_states, judge

if TYPE_CHECKING:
    from pytest_palw.certificate.inventory import Inventory

SCHEMA_NAME = "pytest-palw.certificate"
SCHEMA_VERSION = 2  # 2: the expected inventory, the suite digest, per-phase outcomes
SCHEMA_PATH = Path(__file__).with_name("schema.json")

# pytest's own report categories (pytest_report_teststatus), worst first: a case's outcome.
OUTCOMES = ("error", "failed", "xpassed", "skipped", "xfailed", "passed")
_PHASE_RANK = {"passed": 0, "skipped": 1, "failed": 3}  # any other outcome ranks 2
# Facts each process states for itself; every other fact must be the same in every worker.
PER_PROCESS_FACTS = ("worker", "deselected")
MERGED_BY_NAME = ("fingerprints", "notes", "kernel_infos", "goldens")


@dataclass
class CaseResult:
    id: str  # the inventory's name (conformance/test_x.py::test_f[param])
    nodeid: str  # as pytest reported it
    tier: str | None
    outcome: str = "incomplete"  # one of OUTCOMES, or incomplete: started but never reported done
    duration_s: float = 0.0
    reason: str | None = None
    worker: str | None = None
    # Each report pytest counted for this case, by its category: pytest's summary line is the sum.
    categories: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)  # setup / call / teardown -> the report's outcome
    body: str | None = None  # the case the call's function body ran to its end as (the plugin's witness)
    entries: int | None = None  # how often that body was entered for this case, retries included (witness)
    raised: list[str] = field(default_factory=list)  # the exceptions that left those entries, in order
    swapped: list[str] = field(default_factory=list)  # plugin fixtures whose value was not the plugin's
    crashed: bool = False  # its worker died while running it (xdist's crash report)
    unknown: list[str] = field(default_factory=list)  # categories pytest does not name
    launch: dict | None = None  # {index (V2 order), label, stream} of a case about one launch (session.launch_of)
    started_at: float | None = None  # Unix time the case's setup began (in its worker)
    finished_at: float | None = None  # and its last report ended

    def update(self, report, category: str) -> None:
        self.duration_s += float(report.duration or 0)
        if getattr(report, "start", None) is not None:
            self.started_at = min(self.started_at or report.start, report.start)
            self.finished_at = max(self.finished_at or report.stop, report.stop)
        self.launch = getattr(report, "palw_launch", None) or self.launch
        node = getattr(report, "node", None)  # set by xdist in the controller
        if node is not None:
            self.worker = node.gateway.id
        when = report.when
        if when not in ("setup", "call", "teardown"):  # xdist's report of a case whose worker died
            self.crashed = True
            self.reason = _first_line(str(report.longrepr))
        else:
            seen = self.phases.get(when)
            if seen is None or _PHASE_RANK.get(report.outcome, 2) > _PHASE_RANK.get(seen, 2):
                self.phases[when] = report.outcome
            if when == "call":
                self.body = getattr(report, "palw_body", None)
                self.entries = getattr(report, "palw_entries", None)
                self.raised = list(getattr(report, "palw_raised", None) or [])
                self.swapped = list(getattr(report, "palw_swapped", None) or [])
        if category not in KNOWN_CATEGORIES:
            self.unknown.append(category)
        if category not in OUTCOMES:
            return  # a passing setup or teardown: pytest counts nothing either
        self.categories.append(category)
        if self.outcome != "incomplete" and OUTCOMES.index(self.outcome) <= OUTCOMES.index(category):
            return
        self.outcome = category
        if report.failed:
            self.reason = _first_line(report.longreprtext)
        elif report.skipped:
            self.reason = _skip_reason(report).removeprefix(f"{(self.tier or '').upper()} tier: ")


def _first_line(text: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.lstrip().startswith("E ")]
    return (errors[0] if errors else (lines[-1] if lines else "")).strip()[:500]


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass
class Certificate:
    inventory: Inventory | None = None  # built before any case runs
    suite: dict | None = None  # inventory.suite_digest()
    cases: dict[str, CaseResult] = field(default_factory=dict)  # by case id
    facts: dict = field(default_factory=dict)  # runtime, model, token, fingerprints, ...
    workers: dict[str, dict] = field(default_factory=dict)
    run: RunFacts = field(default_factory=RunFacts)
    started: float | None = None
    finished: float | None = None
    states: dict[str, CaseState] = field(default_factory=dict)  # case id -> its state, given by finish()
    document: dict | None = None  # built once by finish()
    _fact_sources: dict[str, str] = field(default_factory=dict)

    def record(self, case_id: str, report, tier: str | None, category: str) -> None:
        """``category``: pytest's own (``pytest_report_teststatus``) for this report."""
        case = self.cases.setdefault(case_id, CaseResult(case_id, report.nodeid, tier))
        case.update(report, category)

    def merge_facts(self, facts: dict, worker: str) -> None:
        """One process's facts; a fact two workers state differently is a conflict (a verdict reason)."""
        self.workers[worker] = facts.get("worker", {})
        for key, value in facts.items():
            if key in PER_PROCESS_FACTS:
                if key == "deselected":
                    self.facts.setdefault(key, value)
                continue
            if key in MERGED_BY_NAME:
                merged = self.facts.setdefault(key, {})
                for name, item in value.items():
                    self._agree(f"{key}.{name}", merged, name, item, worker)
            else:
                self._agree(key, self.facts, key, value, worker)

    def _agree(self, label: str, merged: dict, name: str, value, worker: str) -> None:
        if name not in merged:
            merged[name] = value
            self._fact_sources[label] = worker
        elif merged[name] != value:
            self.run.conflicts.append(f"{label}: {self._fact_sources[label]} has {_short(merged[name])}, "
                                      f"{worker} has {_short(value)}")

    # -- the verdict and the document, once ---------------------------------------------------------
    def summary(self) -> dict:
        """pytest's own counts for the suite's cases (a case passing its call and erroring in
        teardown counts once in each, as pytest counts it), and the cases that never finished."""
        counts: dict[str, float] = {"collected": len(self.cases)}
        for outcome in ("passed", "failed", "error", "skipped", "xfailed", "xpassed"):
            counts[outcome] = sum(c.categories.count(outcome) for c in self.cases.values())
        counts["incomplete"] = sum(1 for c in self.cases.values() if c.outcome == "incomplete")
        counts["duration_s"] = round((self.finished or 0) - (self.started or 0), 3)
        return counts

    def finish(self, finished: float) -> dict:
        self.finished = finished
        self.states = case_states(self.inventory, self.cases)
        verdict = judge(self.inventory, self.cases, self.run, self.states)
        self.document = {
            "schema": SCHEMA_NAME,
            "version": SCHEMA_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "generator": f"pytest-palw {__version__}",
            "verdict": verdict,
            "inventory": self.inventory.as_dict() if self.inventory is not None else None,
            "suite": self.suite,
            "exit_status": None if self.run.exitstatus is None else int(self.run.exitstatus),
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
            "goldens": self.facts.get("goldens", {}),
            "notes": self.facts.get("notes", {}),
            "workers": self.workers,
            "summary": self.summary(),
            "cases": [{**vars(c), "state": self.states[c.id].value}
                      for c in sorted(self.cases.values(), key=lambda c: c.id)],
        }
        return self.document

    def rejudge(self, exitstatus: int, why: str | None = None) -> bool:
        """The verdict again, with the exit status pytest really ended with (it can change after
        the session's last hook) and ``why`` as one more reason; True when the document changed."""
        if self.document is None:
            return False
        if int(exitstatus) == self.document["exit_status"] and why is None:
            return False
        self.run.exitstatus = int(exitstatus)
        if why is not None:
            self.run.other.append(why)
        self.document["verdict"] = judge(self.inventory, self.cases, self.run, self.states)
        self.document["exit_status"] = int(exitstatus)
        return True

    def write(self, path) -> Path:
        """The JSON at ``path`` and its HTML page beside it (``<stem>.html``), each written whole;
        returns the page. A write that fails leaves neither file (files.FileWriteError)."""
        from pytest_palw.certificate.html import render
        from pytest_palw.files import FileWriteError, write_whole

        if self.document is None:
            raise ValueError("the certificate is written after finish()")
        path = Path(path)
        page = page_path(path)
        try:
            write_whole(path, json.dumps(self.document, indent=1, sort_keys=False) + "\n",
                        fix="free disk space or pass another --certificate path")
            write_whole(page, render(self.document), fix="free disk space or pass another --certificate path")
        except FileWriteError:
            discard(path)
            raise
        return page


def page_path(path) -> Path:
    """Where the HTML page of the certificate at ``path`` goes: beside it, ``<stem>.html``."""
    path = Path(path)
    return path.with_suffix(".html") if path.suffix != ".html" else path.with_name(f"{path.name}.html")


def discard(path) -> None:
    """An older certificate (and its page) must not survive this run: it would speak for it."""
    if path:
        Path(path).unlink(missing_ok=True)
        page_path(path).unlink(missing_ok=True)


def load(path) -> dict:
    """A certificate document from its JSON file (gzip-compressed too), or PalwError in one line."""
    import gzip

    from pytest_palw.errors import PalwError

    path = Path(path)
    try:
        data = path.read_bytes()
        document = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    except (OSError, ValueError, EOFError) as error:
        raise PalwError(f"cannot read the certificate {path} ({error}): pass the JSON file "
                        "`palw certify` wrote (--certificate)") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA_NAME:
        raise PalwError(f"{path} is not a pytest-palw certificate (no \"schema\": "
                        f"\"{SCHEMA_NAME}\"): pass the JSON file `palw certify` wrote")
    known = _schema()["properties"]["version"]["enum"]
    if document.get("version") not in known:
        raise PalwError(f"{path} is a certificate of version {_short(document.get('version'))}, which this "
                        f"pytest-palw {__version__} does not know (it reads {', '.join(map(str, known))}): "
                        "read it with the pytest-palw that wrote it, or certify again")
    import jsonschema

    try:
        validate(document)
    except jsonschema.ValidationError as error:
        where = "/".join(map(str, error.absolute_path)) or "the document"
        raise PalwError(f"{path} is not a valid certificate ({where}: {_short(error.message)}): pass the JSON "
                        "file `palw certify` wrote, unedited") from None
    return document


def validate(document: dict) -> None:
    """Raise jsonschema.ValidationError unless ``document`` matches the certificate schema. The
    compiled check decides (0.02 s for a whole suite's certificate; jsonschema 0.5 s); jsonschema,
    the 2020-12 reference, says why it refuses (tests/certificate/test_schema.py: the two agree)."""
    import fastjsonschema

    try:
        _compiled_schema()(document)
    except fastjsonschema.JsonSchemaValueException as refused:
        import jsonschema

        error = jsonschema.exceptions.best_match(_reference_validator().iter_errors(document))
        raise (error or jsonschema.ValidationError(refused.message)) from None


@functools.cache
def _reference_validator():
    """jsonschema's validator of the schema's own draft, made once (jsonschema.validate checks the
    schema against its metaschema on every call: 90 ms; tests/certificate/test_schema.py checks it)."""
    import jsonschema

    return jsonschema.validators.validator_for(_schema())(_schema())


@functools.cache
def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def _compiled_schema():
    from pytest_palw.schemas import compile_draft7

    return compile_draft7(_schema())
