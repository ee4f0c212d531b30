"""JSON Schema checks compiled once (fastjsonschema, ~20x faster than jsonschema), for schemas
written in 2020-12 that use only keywords draft 7, which fastjsonschema implements, reads alike. A
keyword draft 7 lacks would be ignored by the compiled check, not checked: it is refused here."""

from __future__ import annotations

from collections.abc import Callable

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT7_KEYWORDS = {"$schema", "$id", "$ref", "$defs", "title", "description", "type", "const", "enum", "required",
                   "properties", "additionalProperties", "items", "minItems", "maxItems", "minimum", "maximum",
                   "pattern", "minLength", "maxLength", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}


def schema_keywords(node) -> set[str]:
    """The keywords a schema uses, in itself and every subschema (not the names under properties/$defs)."""
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for key, value in node.items():
        if key in ("properties", "$defs"):
            for subschema in value.values():
                found |= schema_keywords(subschema)
        elif key in ("allOf", "anyOf", "oneOf") or (key == "items" and isinstance(value, list)):
            for subschema in value:
                found |= schema_keywords(subschema)
        elif key in ("items", "not", "if", "then", "else", "additionalProperties"):
            found |= schema_keywords(value)
    return found


def compile_draft7(schema: dict) -> Callable:
    """fastjsonschema's check of ``schema`` read as draft 7 (it raises JsonSchemaValueException);
    ValueError, naming them, when the schema uses keywords outside DRAFT7_KEYWORDS."""
    import fastjsonschema

    unknown = schema_keywords(schema) - DRAFT7_KEYWORDS
    if unknown:
        raise ValueError(f"the schema uses {', '.join(sorted(unknown))}, which a draft-7 check would ignore")
    return fastjsonschema.compile({**schema, "$schema": DRAFT7})
