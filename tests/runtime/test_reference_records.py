"""The CPU reference trace against discovery: our caller checked by our discovery, not a certified claim.

pytest_palw.runtime.reference builds the 361 reference records with the smoke's approve logic
(the caller's C callbacks, pytest_palw.runtime.caller) over stand-in kernel identities, and
discovery (pytest_palw.runtime.discovery) finds the 361 candidates; both read the same graph. These
tests keep that machinery honest (the golden CPU reference stream and the conformance cases rely on
it); what runs native code over it is certified in conformance/test_cpu_reference.py.
"""

from pytest_palw.fixtures.oracles.launch_table import V2_COUNT
from pytest_palw.fixtures.oracles.verify import record_mismatches
from pytest_palw.runtime.names import status_name


def test_every_launch_is_approved(palw_cpu_reference, palw_runtime):
    lib = palw_runtime.lib
    statuses = [status_name(lib, s) for s in palw_cpu_reference.statuses]
    assert len(statuses) == V2_COUNT
    refused = {index: status for index, status in enumerate(statuses) if status != "OK"}
    assert refused == {}, f"the approve logic refused {len(refused)} launches, first {list(refused.items())[:5]}"
    assert palw_cpu_reference.caller.callback_errors == []


def test_records_match_discovery(palw_cpu_reference, palw_runtime):
    """verify_mixed_record of the smoke on every reference record, plus a sketch that was set."""
    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    infos = palw_cpu_reference.caller.infos
    problems = {}
    for index, candidate in enumerate(palw_cpu_reference.reference.candidates):
        record = palw_cpu_reference.records[index]
        found = record_mismatches(ffi, record, index, candidate, infos, lib)
        if list(record.base.base.sketch) == [0, 0, 0, 0]:
            found.append("sketch is all zero")
        if found:
            problems[index] = found
    assert len(palw_cpu_reference.reference.candidates) == V2_COUNT
    assert problems == {}, f"{len(problems)} records differ from discovery, first {list(problems.items())[:3]}"


def _stand_in_identity(ffi, info):
    from pytest_palw.fixtures.oracles.kernel_identities import KernelIdentity

    return KernelIdentity(*(bytes(ffi.buffer(getattr(info.actual_identity, name), 32)) for name in
                            ("producer_variant_id", "work_entry_point_id", "capture_implementation_id")))


def _table_problems(trace, runtime, session, identity_of) -> dict[int, list[str]]:
    from pytest_palw.fixtures.oracles.launch_table import expected_launches
    from pytest_palw.fixtures.oracles.verify import table_mismatches

    ffi, lib, model = runtime.ffi, runtime.lib, session.model_profile
    problems = {}
    for launch in expected_launches(model):
        weight = (model.weight_types[launch.weight], model.weight_shapes[launch.weight]) if launch.weight else None
        found = table_mismatches(ffi, lib, trace.records[launch.index], launch, model.attention,
                                 identity_of(launch), weight, trace.caller.associations[launch.index],
                                 trace.reference.loaded_weights.get(launch.weight))
        if found:
            problems[launch.index] = found
    return problems


def test_the_table_oracle_accepts_the_reference_records_and_names_each_wrong_field(palw_cpu_reference, palw_runtime,
                                                                                   palw_session):
    """The oracle of conformance's record cases (verify.table_mismatches: launch table, model file,
    seed identities), on records whose every field but the identities is right: with the stand-in
    identities they pass; with the seed patch's identities each names the identity; a record with
    one field changed is named by that field."""
    from pytest_palw.fixtures.oracles.kernel_identities import seed_identities
    from pytest_palw.fixtures.oracles.launch_table import V2_FIRST, expected_launches

    ffi, infos, trace = palw_runtime.ffi, palw_cpu_reference.caller.infos, palw_cpu_reference
    stand_in = {klass: _stand_in_identity(ffi, info) for klass, info in (
        ("q4_k", infos.q4), ("q6_k", infos.q6), ("attention_qk", infos.qk), ("attention_softmax", infos.softmax),
        ("attention_pv", infos.pv))}
    assert _table_problems(trace, palw_runtime, palw_session, lambda launch: stand_in[launch.klass]) == {}
    seed = _table_problems(trace, palw_runtime, palw_session, lambda launch: seed_identities()[launch.klass])
    assert len(seed) == V2_COUNT and all(any("is not the seed patch's" in p for p in found) for found in seed.values())

    qk, q6 = trace.records[V2_FIRST["attention_qk"]], trace.records[V2_FIRST["q6_k"]]
    qk.base.base.layer_id += 1
    q6.base.base.k += 256
    try:
        wrong = _table_problems(trace, palw_runtime, palw_session, lambda launch: stand_in[launch.klass])
    finally:
        qk.base.base.layer_id -= 1
        q6.base.base.k -= 256
    assert sorted(wrong) == sorted([V2_FIRST["attention_qk"], V2_FIRST["q6_k"]])
    assert [p.split(" ")[0] for p in wrong[V2_FIRST["attention_qk"]]] == ["layer_id"]
    weight = expected_launches(palw_session.model_profile)[V2_FIRST["q6_k"]].weight
    assert [p.rsplit(" ", 3)[0] for p in wrong[V2_FIRST["q6_k"]]] == ["k", f"k = {weight} ne0 (file)"]


def test_a_refused_launch_is_described_from_the_association_the_runtime_gave(palw_model, palw_session, palw_runtime):
    """conformance/test_reject_index.py's oracle: the caller keeps the association it refuses, and
    refused_launch names its class, layer and operation from it. Here the associations are the
    CPU reference's (the llama bridge's rules over the real graph); at each class's first index
    and at the output head the description is the launch table's launch."""
    from pytest_palw.fixtures.oracles.launch_table import V2_FIRST, expected_launches
    from pytest_palw.runtime.caller import TraceCaller, refused_launch, refused_mismatches
    from pytest_palw.runtime.reference import _decoded, cpu_reference_infos

    ffi, lib = palw_runtime.ffi, palw_runtime.lib
    table = expected_launches(palw_session.model_profile)
    indices = sorted({*V2_FIRST.values(), len(table) - 1})
    with _decoded(palw_model, palw_session.token, build_associations=True) as reference:
        for index in indices:
            caller = TraceCaller(palw_runtime, reference.candidates, version=2, reject_index=index,
                                 digests=palw_session.kernel_digests)
            cpu_reference_infos(palw_runtime, caller, palw_model.profile.attention)
            expected = ffi.new("palw_cuda_producer_launch_v3 *")
            statuses = [caller.approve(actual, expected) for actual in reference.associations[:index + 1]]
            assert statuses[-1] == lib.PALW_CUDA_TRACE_IDENTITY_MISMATCH and caller.rejection_triggered
            launch = table[index]
            assert refused_launch(lib, caller.refused) == {
                "class": launch.klass, "layer": launch.layer, "operation": launch.weight or launch.node}
            assert refused_mismatches(lib, caller.refused, launch, reference.loaded_weights) == []
            elsewhere = table[index - 1] if index else table[index + 1]  # the launch before (or after) it
            assert refused_mismatches(lib, caller.refused, elsewhere, reference.loaded_weights) != []
