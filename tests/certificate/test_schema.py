"""The certificate's schema check: a compiled draft-7 check decides (``certificate.validate``), and
jsonschema, the 2020-12 reference, says why it refuses. The two must agree on every document: the
schema uses only keywords both drafts read alike, and they agree on documents broken in each place."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import fastjsonschema
import jsonschema
import pytest

from pytest_palw import certificate
from pytest_palw.schemas import DRAFT7_KEYWORDS, compile_draft7, schema_keywords

DATA = Path(__file__).with_name("data") / "cpu-certificate.json"


def _first_two(node):
    if isinstance(node, dict):
        return {key: _first_two(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_first_two(value) for value in node[:2]]
    return node


@pytest.fixture(scope="module")
def small_document() -> dict:
    """The CPU tier's certificate with every list cut to its first two items (two cases, two ids of
    each inventory list): every kind of node, quick to check twice."""
    document = _first_two(json.loads(DATA.read_text()))
    certificate.validate(document)
    return document


def test_the_certificate_schema_uses_only_keywords_both_drafts_read_alike():
    schema = json.loads(certificate.SCHEMA_PATH.read_text())
    jsonschema.validators.validator_for(schema).check_schema(schema)
    assert schema_keywords(schema) <= DRAFT7_KEYWORDS, sorted(schema_keywords(schema) - DRAFT7_KEYWORDS)


def test_a_keyword_draft_7_does_not_have_is_refused_not_ignored():
    with pytest.raises(ValueError, match="prefixItems"):
        compile_draft7({"type": "array", "prefixItems": [{"type": "integer"}]})
    with pytest.raises(ValueError, match="unevaluatedProperties"):
        compile_draft7({"type": "object", "properties": {"a": {"unevaluatedProperties": False}}})


@pytest.mark.parametrize("name", ["cpu-certificate.json", "h200-certificate.json.gz"])
def test_a_whole_certificate_passes_both(name):
    """The CPU tier's, and a CERTIFIED H200 run's (every case passed, GPU facts, goldens)."""
    raw = (DATA.parent / name).read_bytes()
    document = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    certificate.validate(document)
    jsonschema.validate(document, json.loads(certificate.SCHEMA_PATH.read_text()))


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list) and node:  # the items of a list share a schema: the first stands for all
        yield from _paths(node[0], (*path, 0))


def _broken(document: dict):
    """Each node in turn replaced by a value of each JSON type, each object member removed, and a
    member added to each object; in place, restored after each yield."""
    for path in list(_paths(document)):
        node = document
        for step in path:
            node = node[step]
        if isinstance(node, dict):
            node["unexpected member"] = 1
            yield (*path, "<added>"), document
            del node["unexpected member"]
        if not path:
            continue
        *parent_path, last = path
        parent = document
        for step in parent_path:
            parent = parent[step]
        for replacement in (None, "x", -1, 1.5, True, []):
            parent[last] = replacement
            yield path, document
        parent[last] = node
        if isinstance(last, str):
            del parent[last]
            yield (*path, "<removed>"), document
            parent[last] = node


def test_both_checks_agree_on_every_broken_document(small_document):
    reference = jsonschema.Draft202012Validator(json.loads(certificate.SCHEMA_PATH.read_text()))
    checked = refused = 0
    for path, broken in _broken(copy.deepcopy(small_document)):
        expected = reference.is_valid(broken)
        try:
            certificate.validate(broken)
            accepted = True
        except jsonschema.ValidationError as error:
            accepted = False
            assert error.message, path
        assert accepted == expected, f"{'/'.join(map(str, path))}: jsonschema {expected}, validate {accepted}"
        checked, refused = checked + 1, refused + (not expected)
    assert checked > 2000 and refused > 500, (checked, refused)  # each kind of break is met


def test_a_refusal_says_where_in_jsonschema_s_words(small_document):
    broken = copy.deepcopy(small_document)
    broken["cases"][0]["outcome"] = "maybe"
    with pytest.raises(jsonschema.ValidationError) as refused:
        certificate.validate(broken)
    assert list(refused.value.absolute_path) == ["cases", 0, "outcome"]


def test_compiled_check_is_fastjsonschema_on_a_draft_7_copy():
    check = compile_draft7({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "integer",
                            "minimum": 0})
    assert check(3) == 3
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        check(-1)
