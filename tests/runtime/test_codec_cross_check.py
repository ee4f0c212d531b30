"""The Python encoder (pytest_palw.runtime.codec) and the C codec (native record_codec.cpp) agree.

Random records with every field drawn independently; the C side is compiled from the real
header and source (pytest_palw.runtime.binding.hostabi), the Python side knows only the field order.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_palw.runtime import codec

_LIMITS = {"Q": 64, "I": 32, "H": 16, "B": 8}


def _fill(abi, values):
    ffi = abi.ffi
    record = ffi.new("palw_cuda_trace_record_v3 *")
    for (path, kind), value in zip(codec.FIELDS, values):
        *parents, leaf = path.split(".")
        target = record[0]
        for part in parents:
            target = getattr(target, part)
        if kind == "id":
            ffi.memmove(getattr(target, leaf), value, 32)
        elif kind == "lanes":
            for lane, item in enumerate(value):
                getattr(target, leaf)[lane] = item
        else:
            setattr(target, leaf, value)
    return record


def _strategy(kind):
    if kind == "id":
        return st.binary(min_size=32, max_size=32)
    if kind == "lanes":
        return st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4)
    return st.integers(0, 2 ** _LIMITS[kind] - 1)


def _c_encode(abi, record) -> bytes:
    ffi, lib = abi.ffi, abi.lib
    out = ffi.new("uint8_t[]", 452)
    assert lib.palw_cuda_trace_encode_record_v3(record, out, 452) == lib.PALW_CUDA_TRACE_OK
    return bytes(ffi.buffer(out, 452))


def test_sizes_agree(abi):
    assert codec.ENCODED_SIZE == abi.lib.PALW_CUDA_TRACE_RECORD_ENCODED_SIZE_V3 == 452


def test_every_field_is_encoded_once(abi):
    """Each field of the C struct appears in the canonical order exactly once."""
    ffi = abi.ffi

    def leaves(ctype, prefix=""):
        for name, field in ctype.fields:
            if field.type.kind == "struct":
                yield from leaves(field.type, f"{prefix}{name}.")
            else:
                yield prefix + name

    assert sorted(leaves(ffi.typeof("palw_cuda_trace_record_v3"))) == sorted(p for p, _ in codec.FIELDS)


def test_the_encoding_holds_no_kernel_digest(abi):
    """What a certificate says of its kernel digest (session.DIGEST_DOES_NOT_PROVE) is the ABI's
    fact: the digest is in a launch's kernel binding, beside the record template, so the canonical
    record of a launch is the same bytes whatever digest the caller bound."""
    from pytest_palw.certificate.facts import DIGEST_DOES_NOT_PROVE

    ffi = abi.ffi
    assert not [path for path, _ in codec.FIELDS if "digest" in path or "binding" in path]
    values = [bytes(range(i, i + 32)) if kind == "id" else [i, i + 1, i + 2, i + 3] if kind == "lanes" else i
              for i, (_, kind) in enumerate(codec.FIELDS, start=1)]
    launch = ffi.new("palw_cuda_producer_launch_v3 *")
    launch.semantic_template = _fill(abi, values)[0]
    encoded = []
    for digest in (b"\x11" * 32, b"\xee" * 32):
        ffi.memmove(launch.kernel_binding.kernel_binary_digest, digest, 32)
        encoded.append(_c_encode(abi, ffi.addressof(launch.semantic_template)))
    assert encoded[0] == encoded[1] == codec.encode_record(launch.semantic_template)
    assert "records and their fingerprints do not contain the digest" in DIGEST_DOES_NOT_PROVE


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[_strategy(kind) for _, kind in codec.FIELDS]))
def test_python_and_c_encoders_agree(abi, values):
    record = _fill(abi, values)
    assert codec.encode_record(record[0]) == _c_encode(abi, record)


def test_fnv1a64_vectors():
    assert codec.fnv1a64(b"") == 0xCBF29CE484222325
    assert codec.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert codec.fingerprint(b"foobar") == "85944171f73967e8"


def test_structural_zeroes_only_the_sketch(abi):
    values = [bytes(range(32)) if k == "id" else ([7, 8, 9, 10] if k == "lanes" else 3) for _, k in codec.FIELDS]
    encoded = codec.encode_record(_fill(abi, values)[0])
    zeroed = codec.structural(encoded * 2)
    assert len(zeroed) == 904 and zeroed[:452] == zeroed[452:]
    differing = [i for i in range(452) if encoded[i] != zeroed[i]]
    assert differing and all(72 <= i < 104 for i in differing)
