"""The terminal summary of a PALW run: the certificate document, as a few lines."""

from __future__ import annotations


def terminal_summary(terminalreporter, document: dict, path: str | None) -> None:
    write = terminalreporter.write_line
    terminalreporter.section("palw certificate")
    runtime, model = document.get("runtime") or {}, document.get("model") or {}
    device = document.get("device") or {}
    if runtime:
        write(f"runtime : {runtime['variant']} {runtime['lib_dir']} (CUDA trace: {runtime['has_cuda_trace']}"
              + (f", {runtime['origin']}" if runtime.get("origin") else "") + ")")
    if device:
        write(f"device  : {device.get('name')} cc {device.get('cc')} (pinned cc {document.get('pinned_cc')})")
    if model:
        write(f"model   : {model['spec']} {model['path']} sha256 {model['sha256'][:16]}…  "
              f"token {document.get('token')}")
    discovery = document.get("discovery")
    if discovery:
        c = discovery["class_counts"]
        write(f"discovery: {discovery['launches']} = {c.get('q4_k', 0)} Q4_K + {c.get('q6_k', 0)} Q6_K + "
              f"{c.get('attention_qk', 0)} QK + {c.get('attention_softmax', 0)} softmax + "
              f"{c.get('attention_pv', 0)} PV")
    for name, value in sorted((document.get("fingerprints") or {}).items()):
        write(f"fingerprint {name}: {value}")
    for name, golden in sorted((document.get("goldens") or {}).items()):
        write(f"golden  : {name}: {golden['origin']} ({golden['fingerprint']})"
              + (f"; {golden['self_comparison']}" if golden.get("self_comparison") else ""))
    s, verdict = document["summary"], document["verdict"]
    inventory = document.get("inventory") or {}
    write(f"cases   : {verdict['passed']} of {verdict['expected']} expected cases passed "
          f"(inventory {inventory.get('sha256', 'none')[:16]}, {verdict['exempt']} exempt); reported: "
          f"{s['collected']} cases, {s['passed']} passed, {s['failed']} failed, {s['error']} errors, "
          f"{s['skipped']} skipped in {s['duration_s']:.1f} s")
    if verdict["certified"]:
        write("verdict : CERTIFIED", green=True, bold=True)
    else:
        write("verdict : not certified: " + "; ".join(verdict["reasons"]), yellow=True, bold=True)
    if path:
        write(f"certificate: {path} and its page, written as pytest exits")
