"""The plugin's fixtures. Heavy objects are per process (one model per xdist worker).

Registered in every run of an environment with the plugin installed: the runtime driver is
imported by a fixture's body, when a case asks for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_palw.errors import or_exit
from pytest_palw.handed import handed

if TYPE_CHECKING:
    from pytest_palw.runtime.caller import TraceCaller


@pytest.fixture(scope="session")
@handed
def palw_session(request):
    from pytest_palw.plugin import palw_session as session_of

    return session_of(request.config)


@pytest.fixture(scope="session")
@handed
def palw_runtime(palw_session):
    """The loaded runtime: llama-cpp-python over the patched libllama + the PALW ABI (cffi)."""
    return or_exit(lambda: palw_session.runtime)


@pytest.fixture(scope="session")
@handed
def palw_model(palw_session, palw_runtime):
    """The model under certification, loaded once per process with the smoke's parameters."""
    return or_exit(lambda: palw_session.model)


@pytest.fixture(scope="session")
@handed
def palw_token(palw_session, palw_model) -> int:
    return palw_session.token


@pytest.fixture
@handed
def palw_context(palw_model):
    """Factory of contexts with the smoke's pinned policy, verified after creation; freed after the test.

    ``palw_context(verify=False, **overrides)`` sets other llama_context_params (misuse cases).
    """
    from pytest_palw.runtime.library import PINNED_POLICY

    made = []

    def make(eval_owner=None, verify: bool = True, **overrides):
        context = palw_model.context(eval_owner=eval_owner, **overrides)
        made.append(context)
        if verify and not overrides:
            policy = context.policy()
            assert policy == PINNED_POLICY, f"runtime did not honour the pinned context policy: {policy}"
        return context

    yield make
    for context in made:
        context.free()


@pytest.fixture(scope="session")
@handed
def palw_discovery(palw_session, palw_model):
    """One-token discovery: the ordered candidates (class, layer, shapes, weight pointer, stage)."""
    return palw_session.discovery


@pytest.fixture(scope="session")
@handed
def palw_caller(palw_session, palw_runtime, palw_discovery):
    """Factory of TraceCallers, the caller side of a trace (its approve / launch_accepted / fault
    callbacks); each call makes a fresh one. ``palw_caller(version=2, reject_index=None,
    candidates=None, change=None)``: version 1 traces the 253 MMVQ launches; ``change`` is
    (index, function) that alters the template approved at that index (TraceCaller).
    """

    from pytest_palw.runtime.caller import TraceCaller, candidate_table

    tables = {}  # version -> the discovered candidates' C table, made once

    def make(version: int = 2, reject_index: int | None = None, candidates=None, change=None) -> TraceCaller:
        table = None
        if candidates is None:
            candidates = palw_discovery.candidates if version == 2 else palw_discovery.mmvq
            if version not in tables:
                tables[version] = candidate_table(palw_runtime.ffi, candidates)
            table = tables[version]
        return TraceCaller(palw_runtime, candidates, version=version, reject_index=reject_index,
                           digests=palw_session.kernel_digests, change=change, table=table)

    return make


def _positive_run(palw_session, palw_model, palw_caller, version: int):
    from pytest_palw.runtime.run import run_trace

    context = palw_model.context()
    try:
        run = run_trace(context, palw_caller(version=version), palw_session.token, keep_logits=True)
    finally:
        context.free()
    if run.record_count:
        palw_session.fingerprints[f"v{version}"] = run.fingerprint
    if version == 2 and run.caller.infos.q4 is not None:
        palw_session.kernel_infos.update(kernel_info_facts(palw_model.runtime, run.caller.infos))
    return run


def kernel_info_facts(runtime, infos) -> dict:
    ffi = runtime.ffi
    facts = {}
    for name in ("q4", "q6", "qk", "softmax", "pv", "collector"):
        info = getattr(infos, name)
        if info is None:
            continue
        entry = {field: int(getattr(info, field)) for field in
                 ("sm_arch", "binary_version", "ptx_version", "num_regs", "max_threads_per_block",
                  "static_shared_memory_bytes", "local_memory_bytes")}
        identity = getattr(info, "actual_identity", None)
        if identity is not None:
            entry["producer_variant_id"] = bytes(ffi.buffer(identity.producer_variant_id, 32)).hex()
            entry["work_entry_point_id"] = bytes(ffi.buffer(identity.work_entry_point_id, 32)).hex()
            entry["capture_implementation_id"] = bytes(ffi.buffer(identity.capture_implementation_id, 32)).hex()
        else:
            entry["capture_implementation_id"] = bytes(ffi.buffer(info.capture_implementation_id, 32)).hex()
        facts[name] = entry
    return facts


@pytest.fixture(scope="session")
@handed
def palw_trace(palw_session, palw_model, palw_caller):
    """A positive V2 (mixed, 361-launch) trace: records, encoded stream, fingerprint, diagnostics."""
    return _positive_run(palw_session, palw_model, palw_caller, 2)


@pytest.fixture(scope="session")
@handed
def palw_trace_v1(palw_session, palw_model, palw_caller):
    """A positive V1 (MMVQ-only, 253-launch) trace."""
    return _positive_run(palw_session, palw_model, palw_caller, 1)


@pytest.fixture(scope="session")
@handed
def palw_cpu_reference(palw_session, palw_model):
    """Discovery + the smoke's approve logic + host sketches -> V3 records, without a producer."""
    from pytest_palw.runtime.reference import cpu_reference_trace

    trace = cpu_reference_trace(palw_model, palw_session.token, palw_session.kernel_digests)
    palw_session.fingerprints["reference"] = trace.fingerprint
    return trace
