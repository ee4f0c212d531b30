"""C-callable entry points (cffi ``extern "Python"``) that dispatch to Python owners.

C gets plain function pointers; ``user_data`` is a cffi handle to the owning object.
An exception never crosses into C: the owner records it and the callback returns its
fail-closed value, and the test that owns the trace reports it.
"""

from __future__ import annotations

import traceback


class CallbackOwner:
    """Base for objects that receive C callbacks; collects the errors raised inside them."""

    def __init__(self):
        self._callback_errors: list[str] = []

    @property
    def callback_errors(self) -> list[str]:
        """The tracebacks of the exceptions raised inside the callbacks."""
        return list(self._callback_errors)

    def guard(self, method, fallback, *args):
        try:
            return method(*args)
        except BaseException:  # noqa: BLE001 - nothing may unwind into C
            self._callback_errors.append(traceback.format_exc())
            return fallback


_installed: set[int] = set()


def install(abi) -> None:
    """Bind the extension's ``extern "Python"`` declarations to the dispatchers (once per module)."""
    if id(abi) in _installed:
        return
    ffi = abi.ffi

    def owner(user_data):
        return ffi.from_handle(user_data)

    @ffi.def_extern()
    def palw_py_eval(tensor, ask, user_data):
        target = owner(user_data)
        return target.guard(target.on_eval, False, tensor, bool(ask))

    @ffi.def_extern()
    def palw_py_change(user_data, launch):
        target = owner(user_data)
        return target.guard(target.on_change, 1, launch)  # 0: changed; nonzero: approve refuses

    _installed.add(id(abi))


def eval_callback_address(abi) -> int:
    """Address of the C eval-callback entry, for llama_context_params.cb_eval."""
    return int(abi.ffi.cast("uintptr_t", abi.lib.palw_py_eval))
