"""Turn the real C header into a cffi cdef, so the ABI has exactly one home.

The header is run through the C preprocessor; integer ``PALW_*`` macros become
``#define NAME ...`` (cffi asks the compiler for the value), ``static inline``
bodies become prototypes, and only functions that the extension can link are kept.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from pytest_palw.errors import ToolMissingError

_INT_MACRO = re.compile(r"#define (PALW_\w+) (\(?\s*(?:0x[0-9a-fA-F]+|\d+)[uUlL]*\s*\)?)$")
_FUNCTION_NAME = re.compile(r"(\w+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*;\s*$", re.S)


def c_compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise ToolMissingError("no C compiler found (cc, gcc, clang): install one or set CC")


def preprocess(header: Path, defines: dict[str, str] | None = None) -> str:
    """The header after ``cc -E -P -dD``: code plus the surviving #define lines."""
    args = [c_compiler(), "-E", "-P", "-dD", "-x", "c"]
    args += [f"-D{key}={value}" for key, value in (defines or {}).items()]
    result = subprocess.run(args + [str(header)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolMissingError(f"preprocessing {header} failed: {result.stderr.strip()[:300]}")
    return result.stdout


def _strip_inline_bodies(source: str) -> str:
    """``static inline T f(args) { ... }`` -> ``T f(args);``."""
    out, index = [], 0
    pattern = re.compile(r"static\s+inline\s+")
    while match := pattern.search(source, index):
        out.append(source[index:match.start()])
        brace = source.index("{", match.end())
        depth, cursor = 0, brace
        while True:
            depth += {"{": 1, "}": -1}.get(source[cursor], 0)
            if depth == 0:
                break
            cursor += 1
        out.append(source[match.end():brace].strip() + ";\n")
        index = cursor + 1
    out.append(source[index:])
    return "".join(out)


def _split_top_level(code: str) -> list[str]:
    """Top-level declarations, split at ';' outside braces."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(code):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            parts.append(code[start:i + 1])
            start = i + 1
    return parts


def header_cdef(
    header: Path,
    first_declaration: str,
    linkable_functions: set[str],
    defines: dict[str, str] | None = None,
) -> str:
    """cdef text for ``header`` from ``first_declaration`` on.

    Non-inline function prototypes are kept only when named in
    ``linkable_functions``; inline ones are always kept (the extension compiles them).
    """
    text = preprocess(header, defines)
    macros, code_lines = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            if match := _INT_MACRO.match(line):
                macros.append(f"#define {match.group(1)} ...")
            continue
        code_lines.append(line)
    code = "\n".join(code_lines)
    code = code[code.index(first_declaration):]
    inline_names = {m.group(1) for m in re.finditer(r"static\s+inline\s+[^{;]*?(\w+)\s*\(", code)}
    kept = []
    for declaration in _split_top_level(_strip_inline_bodies(code)):
        stripped = declaration.strip()
        is_prototype = not stripped.startswith("typedef") and "{" not in stripped
        if is_prototype and (match := _FUNCTION_NAME.search(stripped)):
            name = match.group(1)
            if name not in inline_names and name not in linkable_functions:
                continue
        kept.append(stripped)
    return "\n".join(macros) + "\n" + "\n".join(kept) + "\n"


def defined_functions(sources: list[Path], candidates: set[str]) -> set[str]:
    """Which of ``candidates`` are defined (not just declared) in ``sources``."""
    found = set()
    for source in sources:
        text = source.read_text()
        for name in candidates:
            if re.search(rf"\b{name}\s*\([^;{{]*\)\s*(?:noexcept\s*)?\{{", text):
                found.add(name)
    return found
