"""The terminal summary of a PALW run."""

from __future__ import annotations


def terminal_summary(terminalreporter, palw) -> None:
    write = terminalreporter.write_line
    terminalreporter.section("palw certificate")
    cert = palw.certificate
    facts = cert.facts
    runtime, model, device = facts.get("runtime") or {}, facts.get("model") or {}, facts.get("device") or {}
    if runtime:
        write(f"runtime : {runtime['variant']} {runtime['lib_dir']} (CUDA trace: {runtime['has_cuda_trace']})")
    if device:
        write(f"device  : {device.get('name')} cc {device.get('cc')} (pinned cc {facts.get('pinned_cc')})")
    if model:
        write(f"model   : {model['spec']} {model['path']} sha256 {model['sha256'][:16]}…  token {facts.get('token')}")
    discovery = facts.get("discovery")
    if discovery:
        c = discovery["class_counts"]
        write(f"discovery: {discovery['launches']} = {c.get('q4_k', 0)} Q4_K + {c.get('q6_k', 0)} Q6_K + "
              f"{c.get('attention_qk', 0)} QK + {c.get('attention_softmax', 0)} softmax + "
              f"{c.get('attention_pv', 0)} PV")
    for name, value in sorted(facts.get("fingerprints", {}).items()):
        if not name.startswith("_"):
            write(f"fingerprint {name}: {value}")
    s = cert.summary()
    write(f"cases   : {s['collected']} collected, {s['passed']} passed, {s['failed']} failed, "
          f"{s['error']} errors, {s['skipped']} skipped in {s['duration_s']:.1f} s")
    verdict = cert.verdict()
    if verdict["certified"]:
        write("verdict : CERTIFIED", green=True, bold=True)
    else:
        write("verdict : not certified: " + "; ".join(verdict["reasons"]), yellow=True, bold=True)
    path = palw.option("palw_certificate")
    if path:
        write(f"certificate written to {path}")
