"""The objects the plugin's own fixture functions returned in this process, by fixture name and id:
what a case must receive (identity, checked by the session's witness). A light module: the
fixtures module imports it without loading the session."""

from __future__ import annotations

import functools
import inspect

# A generator fixture's value leaves at its teardown.
HANDED: dict[str, dict[int, object]] = {}

def handed(function):
    """A fixture function of the plugin (pytest_fixtures.py) whose every returned or yielded object
    is remembered in HANDED: the witness checks a case received that very object."""
    values = HANDED.setdefault(function.__name__, {})
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(*args, **kwargs):
            steps = function(*args, **kwargs)
            value = next(steps)
            values[id(value)] = value
            try:
                yield value
            finally:
                values.pop(id(value), None)
            yield from steps  # the fixture's own teardown

        return generator

    @functools.wraps(function)
    def returning(*args, **kwargs):
        value = function(*args, **kwargs)
        values[id(value)] = value
        return value

    return returning
