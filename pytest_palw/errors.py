"""Errors a user can act on: each message names the cause and the fix, in one line."""


def or_exit(step):
    """``step()``; a PalwError stops the pytest session with its one line and exit code."""
    import pytest

    try:
        return step()
    except PalwError as error:
        pytest.exit(f"palw: {error}", returncode=error.exit_code)


class PalwError(Exception):
    """Base class. ``str(error)`` is one line: what went wrong, then how to fix it."""

    exit_code = 2


class SourceError(PalwError):
    """The llama.cpp source could not be obtained or verified."""

    exit_code = 3


class PatchError(PalwError):
    """A patch does not apply to the source tree."""

    exit_code = 4


class ToolMissingError(PalwError):
    """A build tool (cmake, ninja, a compiler, nvcc) is not available."""

    exit_code = 5


class BuildError(PalwError):
    """Configuring or compiling the runtime failed."""

    exit_code = 6


class RuntimeLibraryError(PalwError):
    """The runtime library is missing, unloadable or lacks the PALW symbols."""

    exit_code = 7


class ModelProfileError(PalwError):
    """The model is not the Qwen3-8B Q4_K_M topology the trace is pinned to."""

    exit_code = 8


class CacheError(PalwError):
    """The pytest-palw cache is not a writable directory (read-only, full, a file in its place)."""

    exit_code = 2

    def __init__(self, cause: str):
        super().__init__(f"{cause}: the pytest-palw cache must be a writable directory; point PALW_CACHE_DIR "
                         "at one (e.g. export PALW_CACHE_DIR=$HOME/.cache/pytest-palw) or make it writable")
