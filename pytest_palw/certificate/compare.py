"""What changed between two certificates, one line per change, and which changes are regressions.

A CI gate certifies a runtime change and compares the new certificate with the last certified one
(`palw diff OLD.json NEW.json`): a case, a fingerprint, the verdict or the expected inventory that
got worse is a regression (non-zero exit); a new toolchain, pin, patch set, library or device is
a change a reviewer reads, not a failure by itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pytest_palw.certificate.inventory import expand

SHOWN = 5  # ids named per line


@dataclass(frozen=True)
class Difference:
    what: str
    line: str
    regression: bool = False

    def render(self) -> str:
        return f"{'REGRESSION' if self.regression else 'changed':<10} {self.what}: {self.line}"


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 100 else text[:97] + "..."


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:SHOWN]) + (f", ... (+{len(ids) - SHOWN})" if len(ids) > SHOWN else "")


def _passed(document: dict) -> dict[str, dict]:
    return {case.get("id") or case["nodeid"]: case for case in document.get("cases", [])}


def _verdict(old: dict, new: dict) -> list[Difference]:
    before, after = old["verdict"]["certified"], new["verdict"]["certified"]
    if before == after:
        return []
    if before:
        first = (new["verdict"]["reasons"] or ["no reason given"])[0]
        return [Difference("verdict", f"CERTIFIED -> not certified ({_short(first)})", True)]
    return [Difference("verdict", "not certified -> CERTIFIED")]


def _lost_and_gained(what: str, lost: list[str], lost_text: str, gained: list[str], gained_text: str):
    """A regression line for what was lost, a change line for what was gained."""
    return ([Difference(what, f"{len(lost)} {lost_text}: {_ids(sorted(lost))}", True)] if lost else []) + (
        [Difference(what, f"{len(gained)} {gained_text}: {_ids(sorted(gained))}")] if gained else [])


def _inventory(old: dict, new: dict) -> list[Difference]:
    before, after = old.get("inventory"), new.get("inventory")
    if not before or not after or before.get("sha256") == after.get("sha256"):
        return []
    return _lost_and_gained("inventory", list(set(expand(before)) - set(expand(after))), "case(s) no longer expected",
                            list(set(expand(after)) - set(expand(before))), "case(s) newly expected")


def _cases(old: dict, new: dict) -> list[Difference]:
    before, after = _passed(old), _passed(new)
    required = None
    if new.get("inventory"):
        exempt = {entry["id"] for entry in new["inventory"]["exempt"]}
        required = set(expand(new["inventory"])) - exempt
    worse, better = [], []
    for case_id, case in before.items():
        if case.get("outcome") != "passed" or (required is not None and case_id not in required):
            continue
        now = after.get(case_id)
        if now is None or now.get("outcome") != "passed":
            outcome = "not run" if now is None else now.get("outcome")
            reason = f" ({_short(now['reason'])})" if now is not None and now.get("reason") else ""
            worse.append(f"{case_id} {outcome}{reason}")
    for case_id, case in after.items():
        if case.get("outcome") == "passed" and case_id in before and before[case_id].get("outcome") != "passed":
            better.append(case_id)
    return _lost_and_gained("cases", worse, "passed before and not now", better, "pass now and did not before")


def _fingerprints(old: dict, new: dict) -> list[Difference]:
    before, after = old.get("fingerprints") or {}, new.get("fingerprints") or {}
    out = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) == after.get(name):
            continue
        was, now = before.get(name, "none"), after.get(name, "none")
        out.append(Difference(f"fingerprint {name}", f"{was} -> {now}", name in before))
    return out


def _fact(document: dict, path: str):
    value: dict | None = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


# What a reviewer of a runtime change wants named: (label, path in the document).
FACTS = (
    ("pin", "runtime.pin.cc"), ("pinned cc", "pinned_cc"), ("variant", "runtime.variant"),
    ("seed patch", "runtime.patches_applied.seed_patch"), ("overlays", "runtime.patches_applied.overlays"),
    ("library sha256", "kernel_digest.sha256"), ("build key", "runtime.manifest.key"),
    ("origin", "runtime.origin"), ("producer", "runtime.producer.sha256"),
    ("C++ runtime ok", "runtime.cxx_runtime_ok"), ("device", "device.name"), ("device cc", "device.cc"),
    ("driver", "device.driver"), ("model sha256", "model.sha256"), ("token", "token"),
    ("suite sha256", "suite.sha256"), ("generator", "generator"), ("pytest", "pytest.version"),
    ("plugins", "pytest.plugins"),
)


def _facts(old: dict, new: dict) -> list[Difference]:
    out = []
    for label, path in FACTS:
        before, after = _fact(old, path), _fact(new, path)
        if before != after:
            # a C++ runtime check that held and no longer does is a regression
            out.append(Difference(label, f"{_short(before)} -> {_short(after)}",
                                  label == "C++ runtime ok" and before is True))
    libraries_before = _fact(old, "runtime.libraries") or {}
    libraries_after = _fact(new, "runtime.libraries") or {}
    for name in sorted(set(libraries_before) & set(libraries_after)):  # read from the mapped bytes
        if libraries_before[name] != libraries_after[name]:
            out.append(Difference(f"library {name}", f"{_short(libraries_before[name])} -> "
                                                      f"{_short(libraries_after[name])}"))
    tools_before = _fact(old, "runtime.toolchain") or {}
    tools_after = _fact(new, "runtime.toolchain") or {}
    for tool in sorted(set(tools_before) | set(tools_after)):
        if tools_before.get(tool) != tools_after.get(tool):
            out.append(Difference(f"toolchain {tool}",
                                  f"{_short(tools_before.get(tool))} -> {_short(tools_after.get(tool))}"))
    return out


def compare(old: dict, new: dict) -> list[Difference]:
    """Every difference that matters between two certificate documents, regressions first."""
    found = (_verdict(old, new) + _inventory(old, new) + _cases(old, new) + _fingerprints(old, new)
             + _facts(old, new))
    return sorted(found, key=lambda d: not d.regression)
