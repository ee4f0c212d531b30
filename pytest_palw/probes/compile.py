"""Compile a probe's helper once into the cache, under a lock, written whole."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_palw.cache import exclusive


def compile_once(target: Path, command: Sequence[str], *, what: str, failure: Callable[[str], str],
                 source: tuple[str, str] | None = None, after: Sequence[str] = ()) -> Path:
    """``command [SOURCE] -o PARTIAL [after...]`` run once for ``target`` (a name keyed by everything the
    output depends on): under ``target``'s lock, the output renamed into place only when complete.
    ``source``: (text, suffix) written beside the target first. AssertionError(failure(stderr)) when the
    compiler fails: the case that needs the helper fails with the reason."""
    with exclusive(target.with_suffix(".lock"), what=what):
        if not target.is_file():
            arguments = list(command)
            if source is not None:
                text, suffix = source
                written = target.with_suffix(suffix)
                written.write_text(text)
                arguments.append(str(written))
            partial = target.with_name(target.name + ".partial")
            result = subprocess.run([*arguments, "-o", str(partial), *after], capture_output=True, text=True)
            if result.returncode != 0:
                partial.unlink(missing_ok=True)
                raise AssertionError(failure(result.stderr))
            partial.replace(target)
    return target
