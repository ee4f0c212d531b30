"""One self-contained HTML page of a certificate, for a person to read (`palw report`).

The page: verdict and reasons, failures with their assertion messages, the facts of the run,
the 361-launch map (one cell per launch, coloured by class, marked by the outcome of the cases
about its index) and the claims table (one row per conformance module). No network fetch:
inline CSS, no framework, a few lines of inline script that record what the browser rendered.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import jinja2

from pytest_palw import paths
from pytest_palw.certificate import load, page_path
from pytest_palw.certificate.inventory import claim_of, launch_table, parse_case_id
from pytest_palw.certificate.legacy import INDEX_CASES, current
from pytest_palw.certificate.state import CaseState
from pytest_palw.files import write_whole
from pytest_palw.fixtures.oracles.launch_table import mmvq_positions

TEMPLATE = "report.html.j2"
FAIL_COLOUR = "#c62828"  # the one failure colour: banner, failing cells, failure list
CLASS_LABELS = {"q4_k": "Q4_K", "q6_k": "Q6_K", "attention_qk": "QK",
                "attention_softmax": "softmax", "attention_pv": "PV"}
_RANK = ("passed", "skipped", "failed")  # CaseState.tone's values, better first
SMOKE_CASE = ("test_positive_trace.py", "test_fingerprint_equals_seed_smoke")
_PRESENT: dict[object, str] = {True: "present", False: "absent"}
_OK: dict[object, str] = {True: "ok", False: "NOT ok"}


def _tone(case: dict) -> str:
    """passed | failed | skipped (not run): the page's class of the case's state."""
    return CaseState(case["state"]).tone


def launch_cells(document: dict) -> list[dict]:
    """One cell per expected launch: class, layer, tensor, outcome and the cases behind it (each
    case's launch as its run recorded it: CaseResult.launch)."""
    document = current(document)
    launches = launch_table(document.get("model"))
    mmvq = set(mmvq_positions(launches))
    streams = launch_families(document)  # label -> stream
    by_index: dict[int, dict[str, str]] = {launch.index: {} for launch in launches}
    for case in document.get("cases", []):
        launch = case["launch"]
        if launch and launch["index"] in by_index:  # two cases of one family at one launch: the worse outcome
            results = by_index[launch["index"]]
            results[launch["label"]] = max(results.get(launch["label"], "passed"), _tone(case), key=_RANK.index)
    cells = []
    for launch in launches:
        wanted = [label for label, stream in streams.items() if stream == "v2" or launch.index in mmvq]
        results = {label: by_index[launch.index].get(label, "not run") for label in wanted}
        outcomes = set(results.values())
        outcome = ("failed" if "failed" in outcomes else "passed" if outcomes == {"passed"} else "not-run")
        layer = "output head" if launch.layer is None else f"layer {launch.layer}"
        tensor = launch.weight or launch.node
        lines = [f"#{launch.index} · {CLASS_LABELS[launch.klass]} · {layer} · {tensor}"]
        lines += [f"{label}: {result.replace('skipped', 'not run')}" for label, result in results.items()]
        cells.append({"index": launch.index, "klass": launch.klass, "layer": launch.layer,
                      "role": launch.role, "tensor": tensor, "outcome": outcome, "title": "\n".join(lines)})
    return cells


def launch_families(document: dict) -> dict[str, str]:
    """label -> stream of every family of launch cases in the certified run's inventory."""
    functions = (document.get("inventory") or {}).get("functions") or []
    families = {f["launch"]["label"]: f["launch"]["stream"] for f in functions if f.get("launch")}
    return families or dict(INDEX_CASES.values())  # an inventory older than them: the families the page knew then


def module_claims(document: dict) -> list[dict]:
    """One row per conformance module: its claim (as the certified run's inventory read it; for an
    older certificate, from the installed suite) and its case counts."""
    counts: dict[str, Counter] = {}
    for case in current(document).get("cases", []):
        counts.setdefault(parse_case_id(case["id"])[0], Counter())[_tone(case)] += 1
    claims = (document.get("inventory") or {}).get("claims")
    if claims is None:
        claims = {path.name: dict(zip(("scope", "claim"), claim_of(path)))
                  for path in sorted(paths.CONFORMANCE_DIR.glob("test_*.py"))}
    rows = []
    for module in sorted(set(claims) | set(counts)):
        scope, claim = ((claims[module]["scope"], claims[module]["claim"]) if module in claims
                        else (None, "(not in the suite the certificate was made with)"))
        tally = counts.get(module, Counter())
        rows.append({"module": module, "scope": scope, "claim": claim, "passed": tally["passed"],
                     "failed": tally["failed"], "skipped": tally["skipped"],
                     "status": "failed" if tally["failed"] else
                               "passed" if tally["passed"] and not tally["skipped"] else
                               "partial" if tally["passed"] else "not-run"})
    return rows


def smoke_agreement(document: dict) -> str:
    """"plugin v2 fingerprint == seed smoke fingerprint: yes/no", or why it was not compared."""
    fingerprints = document.get("fingerprints") or {}
    smoke = fingerprints.get("seed_smoke_v2") or fingerprints.get("smoke")
    case = next((c for c in current(document).get("cases", []) if parse_case_id(c["id"])[:2] == SMOKE_CASE), None)
    if smoke and fingerprints.get("v2"):
        return f"plugin v2 fingerprint == seed smoke fingerprint: {'yes' if smoke == fingerprints['v2'] else 'no'}"
    if case is not None and _tone(case) == "failed":
        return f"plugin v2 fingerprint == seed smoke fingerprint: no ({case.get('reason') or 'the case failed'})"
    why = f" ({case['reason']})" if case is not None and case.get("reason") else ""
    return f"seed smoke not compared in this run{why}"


def _runtime_facts(document: dict) -> list[tuple[str, object]]:
    """What the runtime was built from: newer certificates say it directly, older ones in the manifest."""
    runtime = document.get("runtime") or {}
    manifest = runtime.get("manifest") or {}
    inputs = manifest.get("inputs") or {}
    applied = runtime.get("patches_applied") or {}
    pin = document.get("pinned_cc")
    sdist = inputs.get("sdist") or {}
    overlays = runtime.get("overlays") or applied.get("overlays") or [
        Path(item.get("path", "?")).name for item in inputs.get("overlays") or []]
    cxx = runtime.get("cxx_runtime") or manifest.get("cxx_runtime") or {}
    cxx_ok = cxx.get("ok", runtime.get("cxx_runtime_ok")) if isinstance(cxx, dict) else cxx
    observed = runtime.get("observed") or {}
    facts = [("origin", runtime.get("origin") and (
                 "brought: a directory of libraries from another build; every fact below was observed in its files "
                 "or in this run" if runtime.get("origin") == "brought" else "palw-build: made by `palw build`")),
             ("variant", runtime.get("variant")),
             ("pinned cc", pin if pin is not None else "none (not a CUDA runtime)"),
             ("pin", runtime.get("pin")), ("chosen by", runtime.get("chosen_by")),
             ("CUDA trace procs", _PRESENT.get(runtime.get("has_cuda_trace"))),
             ("cuda arch", manifest.get("cuda_arch")),
             ("llama.cpp", sdist and f"{sdist.get('name')} {sdist.get('version')} sdist"),
             ("seed patch", applied.get("seed_patch") or (inputs.get("seed_patch") or {}).get("sha256")),
             ("overlays", overlays or ("none" if runtime or manifest else None)),
             ("native producer", (runtime.get("producer") or {}).get("sha256")
              or (inputs.get("native") or {}).get("sha256")),
             ("toolchain", {name: version for name, version in
                            (runtime.get("toolchain") or manifest.get("tools") or {}).items() if version}),
             ("C++ runtime", _OK.get(cxx_ok, cxx_ok)),
             ("library", runtime.get("lib_dir")), ("build key", manifest.get("key")),
             ("built", manifest.get("created")),
             ("library sha256 (mapped)", observed.get("libraries")),
             ("PALW functions exported", observed.get("palw_functions")),
             ("PALW backend procs", observed.get("backend_procs") or (observed and "none")),
             ("request ABI", {name: f"abi_version {seen.get('abi_version')}, struct_size {seen.get('struct_size')}"
                              for name, seen in (observed.get("request_abi") or {}).items()}),
             ("seed tools", {role: path or "absent" for role, path in (runtime.get("tools") or {}).items()}),
             ("not stated", {name: why for name, why in (runtime.get("absent") or {}).items()})]
    return [(name, value) for name, value in facts if value not in (None, "", [], {})]


def _fact(value) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_fact(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fact(item) for item in value) or "none"
    return str(value)


def _columns(cells: list[dict]) -> list[tuple[str, list[dict]]]:
    """The map's columns in launch order: one per layer, then the output head."""
    columns: dict = {}
    for cell in cells:
        columns.setdefault(cell["layer"], []).append(cell)
    return [("out" if layer is None else str(layer), column) for layer, column in columns.items()]


def render(document: dict) -> str:
    """The HTML page of one certificate document (as written by `palw certify`)."""
    environment = jinja2.Environment(loader=jinja2.PackageLoader("pytest_palw.certificate", "templates"),
                                     autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                     undefined=jinja2.ChainableUndefined)
    environment.filters["fact"] = _fact
    environment.filters["message"] = lambda reason: re.sub(r"^E\s+", "", reason or "") or "no message recorded"
    document = current(document)
    cases = document.get("cases", [])
    cells = launch_cells(document)
    skipped = Counter(case.get("reason") or "no reason given" for case in cases if case["outcome"] == "skipped")
    model = document.get("model") or {}
    return environment.get_template(TEMPLATE).render(
        doc=document, verdict=document["verdict"], summary=document.get("summary") or {},
        failures=[case for case in cases if _tone(case) == "failed"],
        tally=Counter(_tone(case) for case in cases),
        runtime_facts=_runtime_facts(document), device=document.get("device") or {},
        model=model, profile=model.get("profile") or {},
        fingerprints={k: v for k, v in (document.get("fingerprints") or {}).items() if not k.startswith("_")},
        smoke=smoke_agreement(document), notes=document.get("notes") or {},
        cells=cells, roles=[c["role"] for c in cells if c["layer"] == 0], columns=_columns(cells),
        class_labels=CLASS_LABELS, class_counts=Counter(c["klass"] for c in cells),
        outcome_counts=Counter(c["outcome"] for c in cells),
        claims=module_claims(document), skipped=skipped.most_common(), fail_colour=FAIL_COLOUR,
        inventory=document.get("inventory") or {}, suite=document.get("suite") or {})


def write_report(cert_path, out_path=None) -> Path:
    """Render the certificate at ``cert_path``; write ``<cert stem>.html`` beside it by default."""
    cert_path = Path(cert_path)
    document = load(cert_path)
    out = Path(out_path) if out_path else page_path(cert_path)
    write_whole(out, render(document), fix="name a writable file with -o, e.g. -o report.html")
    return out
