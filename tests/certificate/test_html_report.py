"""`palw report`: a certificate as one self-contained HTML page, checked as Chromium renders it.

data/cpu-certificate.json is a real `palw certify -n 2` run (CPU runtime, tiny model, schema v2,
2026-12-04), stripped of the 1950 pinned cases about one launch index that a CPU run skips: absent
or skipped, the map shows those launches as not run. The GPU certificate is derived from it: a
CUDA device at the pinned cc, every case passed, the per-index GPU cases of the real suite added,
one of them failed.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_palw import cli
from pytest_palw.certificate import validate
from pytest_palw.certificate.html import FAIL_COLOUR, render
from pytest_palw.paths import CONFORMANCE_DIR

CPU_CERTIFICATE = Path(__file__).with_name("data") / "cpu-certificate.json"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary for the browser checks: `apt-get install chromium`")
CLASS_COUNTS = {"q4_k": 216, "q6_k": 37, "attention_qk": 36, "attention_softmax": 36, "attention_pv": 36}
# The suite's cases about one launch index that only a CUDA runtime runs: case -> index count.
GPU_INDEX_CASES = {"test_reject_index.py::test_reject_v2": 361, "test_reject_index.py::test_reject_v1": 253,
                   "test_positive_trace.py::test_v2_record": 361, "test_positive_trace.py::test_v1_record": 253,
                   "test_positive_trace.py::test_device_sketch_equals_host_sketch": 361,
                   "test_non_mutation.py::test_association_matches_discovery": 361}
FAILING = "conformance/test_reject_index.py::test_reject_v2[17]"  # launch 17: blk.1.ffn_gate, Q4_K
FAILING_REASON = "E   AssertionError: decode succeeded although a launch was rejected"
FINGERPRINT = "82b9a2577f76a1be"


def cpu_document() -> dict:
    return json.loads(CPU_CERTIFICATE.read_text())


def gpu_document(failing: str | None = FAILING) -> dict:
    document = cpu_document()
    document["device"] = {"kind": "cuda", "name": "NVIDIA H200", "cc": 900, "driver": "570.124.06"}
    document["pinned_cc"] = 900
    document["runtime"].update(variant="cuda", has_cuda_trace=True)
    document["model"]["spec"] = "profile:full"
    cases = {case["nodeid"]: case for case in document["cases"]}
    for name, count in GPU_INDEX_CASES.items():
        for index in range(count):
            nodeid = f"conformance/{name}[{index}]"
            cases.setdefault(nodeid, {"id": nodeid, "nodeid": nodeid, "tier": "pinned", "outcome": "skipped",
                                      "duration_s": 0.5, "crashed": False, "unknown": []})
    for case in cases.values():
        if case["tier"] != "metal":
            case.update(outcome="passed", reason=None, categories=["passed"], body=case["id"].split("[")[0],
                        phases={"setup": "passed", "call": "passed", "teardown": "passed"})
    reasons = [reason for reason in document["verdict"]["reasons"] if "not run" not in reason]
    expected = document["inventory"]["required"]
    if failing:
        cases[failing].update(outcome="failed", reason=FAILING_REASON, categories=["failed"])
        cases[failing]["phases"]["call"] = "failed"
        reasons.insert(0, f"1 case(s) failed (first: {failing})")
    document["cases"] = sorted(cases.values(), key=lambda case: case["nodeid"])
    document["fingerprints"].update(v2=FINGERPRINT, v1="5d0c1e2f3a4b5c6d", seed_smoke_v2=FINGERPRINT)
    document["verdict"] = {"certified": not reasons, "reasons": reasons, "expected": expected,
                           "passed": expected - bool(failing), "exempt": 1}
    outcomes = Counter(case["outcome"] for case in document["cases"])
    document["summary"].update(collected=len(cases), passed=outcomes["passed"], failed=outcomes["failed"],
                               skipped=outcomes["skipped"])
    validate(document)
    return document


class Page(HTMLParser):
    """Every element's attributes, and the text under each element that has an id."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "source", "wbr"}

    def __init__(self, html: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.text: dict[str, str] = {}
        self._ids: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag not in self.VOID:
            self._ids.append(attrs.get("id") or (self._ids[-1] if self._ids else None))

    def handle_endtag(self, tag):
        if tag not in self.VOID and self._ids:
            self._ids.pop()

    def handle_data(self, data):
        for element_id in set(filter(None, self._ids)):
            self.text[element_id] = self.text.get(element_id, "") + data

    def said(self, element_id: str) -> str:
        return " ".join(self.text.get(element_id, "").split())

    @property
    def cells(self) -> list[dict]:
        return [attrs for _, attrs in self.elements if "data-index" in attrs]

    @property
    def body(self) -> dict:
        return next(attrs for tag, attrs in self.elements if tag == "body")

    def order_of(self, element_id: str) -> int:
        return next(i for i, (_, attrs) in enumerate(self.elements) if attrs.get("id") == element_id)


def browse(document: dict, tmp_path: Path, name: str) -> Page:
    """Write the page, let Chromium render it (DOM after its scripts ran) and screenshot it."""
    page = tmp_path / f"{name}.html"
    page.write_text(render(document))
    artifacts = Path(os.environ.get("PALW_ARTIFACTS_DIR") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--hide-scrollbars", "--window-size=1280,2000"]
    shot = artifacts / f"{name}.png"
    for extra in ([f"--screenshot={shot}"], ["--dump-dom"]):
        result = subprocess.run(command + extra + [page.as_uri()], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"chromium failed ({result.returncode}): {result.stderr[-1500:]}"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"chromium wrote no screenshot at {shot}"
    return Page(result.stdout)


def rgb(colour: str) -> str:
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


@needs_chromium
def test_gpu_certificate_with_one_failure_renders_it_at_a_glance(tmp_path):
    page = browse(gpu_document(), tmp_path, "report-gpu-one-failure")
    assert page.said("verdict").startswith("PALW runtime certificate NOT CERTIFIED 1 case(s) failed")
    assert "3021 of 3022 expected cases passed (1 exempt)" in page.said("expected")
    cells = page.cells
    assert page.body["data-rendered-cells"] == "361" and len(cells) == 361
    assert [int(cell["data-index"]) for cell in cells] == list(range(361))  # launch order
    assert Counter(cell["data-class"] for cell in cells) == CLASS_COUNTS
    failed = [cell for cell in cells if cell["data-outcome"] == "failed"]
    assert [cell["data-index"] for cell in failed] == ["17"]
    assert failed[0]["data-border"] == f"{rgb(FAIL_COLOUR)} 3px"  # computed by the browser
    assert all(rgb(FAIL_COLOUR) not in cell["data-border"] for cell in cells if cell is not failed[0])
    assert Counter(cell["data-outcome"] for cell in cells) == {"passed": 360, "failed": 1}
    assert failed[0]["data-class"] == "q4_k" and failed[0]["data-layer"] == "1"
    for fact in ("#17", "Q4_K", "layer 1", "blk.1.ffn_gate.weight", "reject V2: failed"):
        assert fact in failed[0]["title"]
    assert FAILING in page.said("failures") and FAILING_REASON.split(maxsplit=1)[1] in page.said("failures")
    assert page.order_of("failures") < page.order_of("launch-map") < page.order_of("claims")
    assert "plugin v2 fingerprint == seed smoke fingerprint: yes" in page.said("smoke")
    assert int(page.body["data-scroll-width"]) <= 1280, "the page scrolls sideways at 1280 px"


@needs_chromium
def test_cpu_certificate_shows_every_reason_and_the_launches_not_run(tmp_path):
    document = cpu_document()
    page = browse(document, tmp_path, "report-cpu")
    verdict = page.said("verdict")
    assert verdict.startswith("PALW runtime certificate NOT CERTIFIED")
    for reason in document["verdict"]["reasons"]:
        assert " ".join(reason.split()) in verdict
    cells = page.cells
    assert len(cells) == 361 and Counter(cell["data-class"] for cell in cells) == CLASS_COUNTS
    assert {cell["data-outcome"] for cell in cells} == {"not-run"}
    assert "reject V2: not run" in cells[0]["title"] and "order: passed" in cells[0]["title"]
    assert page.said("failures").endswith("No case failed.")
    assert page.said("smoke").startswith("seed smoke not compared in this run")
    assert int(page.body["data-scroll-width"]) <= 1280, "the page scrolls sideways at 1280 px"


def test_claims_are_those_of_the_certified_run_with_the_certificate_counts():
    """The claims table: the modules and claims the run's inventory read (not the suite installed
    where the page is rendered), with the certificate's counts; an older certificate without an
    inventory shows the installed suite's."""
    document = gpu_document()
    page = Page(render(document))
    rows = {attrs["data-module"]: attrs for _, attrs in page.elements if "data-module" in attrs}
    assert sorted(rows) == sorted(document["inventory"]["claims"])
    for module, row in rows.items():
        docstring = ast.get_docstring(ast.parse((CONFORMANCE_DIR / module).read_text()))
        claim = page.said(f"claim-{module}")
        assert docstring.startswith("Claim") and len(claim) > 20 and claim in " ".join(docstring.split())
        outcomes = Counter(case["outcome"] for case in document["cases"] if f"/{module}::" in case["nodeid"])
        assert (row["data-passed"], row["data-failed"], row["data-skipped"]) == tuple(
            str(outcomes[name]) for name in ("passed", "failed", "skipped"))
    assert rows["test_reject_index.py"]["data-failed"] == "1"
    del document["inventory"]
    page = Page(render(document))
    rows = {attrs["data-module"] for _, attrs in page.elements if "data-module" in attrs}
    assert rows == {path.name for path in CONFORMANCE_DIR.glob("test_*.py")}


def test_certified_gpu_certificate_says_so_and_every_launch_passed():
    document = gpu_document(failing=None)
    page = Page(render(document))
    assert page.said("verdict").startswith("PALW runtime certificate CERTIFIED Every conformance case ran")
    assert page.said("expected").startswith("3022 of 3022 expected cases passed (1 exempt) · inventory sha256 "
                                            f"{document['inventory']['sha256'][:16]} · suite sha256")
    assert Counter(cell["data-outcome"] for cell in page.cells) == {"passed": 361}
    assert page.said("failures").endswith("No case failed.")


def test_a_certificate_without_runtime_or_model_still_renders_the_full_topology_map():
    document = cpu_document()
    document.update(runtime=None, model=None, device=None, fingerprints={}, cases=[])
    page = Page(render(document))
    assert Counter(cell["data-class"] for cell in page.cells) == CLASS_COUNTS
    assert page.said("smoke") == "seed smoke not compared in this run"


def test_palw_report_writes_one_self_contained_page(tmp_path, capsys):
    certificate = tmp_path / "cert.json"
    shutil.copy(CPU_CERTIFICATE, certificate)
    assert cli.main(["report", str(certificate)]) == 0
    html = (tmp_path / "cert.html").read_text()
    assert html.count('data-index="') == 361
    assert "http://" not in html and "https://" not in html, "the page must not fetch anything"
    assert cli.main(["report", str(certificate), "-o", str(tmp_path / "out" / "page.html")]) == 0
    assert (tmp_path / "out" / "page.html").read_text() == html
    assert f"palw: report {tmp_path / 'out' / 'page.html'}" in capsys.readouterr().out


def test_palw_report_refuses_a_file_that_is_no_certificate_in_one_line(tmp_path, capsys):
    other = tmp_path / "manifest.json"
    other.write_text('{"schema": "pytest-palw.runtime-manifest"}')
    assert cli.main(["report", str(other)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "is not a pytest-palw certificate" in error and "palw certify" in error
    assert not (tmp_path / "manifest.html").exists()


@needs_chromium
def test_the_real_h200_certificate(tmp_path):
    """The certificate `palw certify --model profile:full -n 8 --require-certified` wrote on the
    lent H200 (2026-12-04, commit b52b811, schema v2), unedited: what a reader of a real GPU
    certification sees."""
    import gzip

    document = json.loads(gzip.decompress((CPU_CERTIFICATE.with_name("h200-certificate.json.gz")).read_bytes()))
    validate(document)
    page = browse(document, tmp_path, "report-h200")
    assert page.said("verdict").startswith("PALW runtime certificate CERTIFIED")
    assert page.said("expected").startswith("3051 of 3051 expected cases passed (1 exempt)")
    cells = page.cells
    assert len(cells) == 361 and Counter(cell["data-class"] for cell in cells) == CLASS_COUNTS
    assert Counter(cell["data-outcome"] for cell in cells) == {"passed": 361}
    assert "plugin v2 fingerprint == seed smoke fingerprint: yes" in page.said("smoke")
    assert int(page.body["data-scroll-width"]) <= 1280, "the page scrolls sideways at 1280 px"


@needs_chromium
def test_the_page_prints_on_a4(tmp_path):
    """Chromium's own print to PDF: every page is A4 (595 x 842 pt)."""
    import re

    page = tmp_path / "report.html"
    page.write_text(render(gpu_document()))
    pdf = tmp_path / "report.pdf"
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--no-pdf-header-footer",
                             f"--print-to-pdf={pdf}", page.as_uri()], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and pdf.is_file(), result.stderr[-1500:]
    boxes = re.findall(rb"MediaBox \[0 0 ([\d.]+) ([\d.]+)\]", pdf.read_bytes())
    assert boxes and all(abs(float(w) - 595.3) < 1 and abs(float(h) - 841.9) < 1 for w, h in boxes), boxes


def test_a_brought_runtime_page_says_what_was_observed_and_what_is_not_stated():
    """A brought runtime (no manifest): the page names the origin, the observed library digests and
    ABI, and lists the facts only a manifest knows as not stated."""
    from pytest_palw.runtime.brought import MANIFEST_ONLY

    document = cpu_document()
    document["runtime"] = {
        "lib_dir": "/vendor/lib", "variant": "cpu", "has_cuda_trace": False, "origin": "brought", "manifest": {},
        "tools": {"observer": "/vendor/bin/llama-palw-observer", "smoke": None},
        "observed": {"libraries": {"/vendor/lib/libllama.so.0.0.0": "ab" * 32},
                     "request_abi": {"palw_cuda_llama_trace_request_v2": {"abi_version": 2, "struct_size": 56}}},
        "absent": {name: "only a `palw build` manifest knows it" for name in MANIFEST_ONLY}}
    text = render(document)
    assert "brought: a directory of libraries from another build" in text
    assert "/vendor/lib/libllama.so.0.0.0: " + "ab" * 32 in text
    assert "palw_cuda_llama_trace_request_v2: abi_version 2, struct_size 56" in text
    assert "smoke: absent" in text
    for name in MANIFEST_ONLY:
        assert f"{name}: only a `palw build` manifest knows it" in text
    assert "build key" not in text.split("brought:")[1].split("</table>")[0]
