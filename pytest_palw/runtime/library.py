"""A loaded PALW runtime: libllama through llama-cpp-python, the PALW ABI through cffi.

Model and context settings are the seed smoke tool's (make_context_params and the
model params in its main), so a trace driven from Python is the trace the smoke takes.
"""

from __future__ import annotations

import ctypes
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pytest_palw.errors import ModelProfileError, RuntimeLibraryError
from pytest_palw.runtime.binding.llama import load_llama_cpp
from pytest_palw.runtime.binding.runtime_abi import RuntimeLayout, load_runtime_abi
from pytest_palw.runtime.brought import (
    ORIGIN_BROUGHT,
    ORIGIN_BUILD,
    TOOL_NAMES,
    check_abi,
    check_cxx_runtime,
    device_hook,
    find_tools,
    lib_dir_of,
    observe,
    suite_abi_dir,
    tool_places,
)
from pytest_palw.runtime.callbacks import eval_callback_address, install

MANIFEST_NAME = "palw-manifest.json"
CONTEXT_TOKENS = 512  # the smoke's CONTEXT_TOKENS
# Model.context's policy as Context.policy reads it back from the runtime
PINNED_POLICY = {"n_ctx": CONTEXT_TOKENS, "n_batch": 1, "n_ubatch": 1, "n_seq_max": 1, "n_threads": 1,
                 "n_threads_batch": 1}
INT32_MAX = 2**31 - 1
PALW_SYMBOL = "llama_palw_cuda_trace_attach_v2"  # a libllama exporting it is a PALW trace build


def not_a_palw_library(lib_dir: Path) -> RuntimeLibraryError:
    return RuntimeLibraryError(f"{lib_dir}/libllama.so exports no llama_palw_* functions: it is not a PALW trace "
                               "build; build one with `palw build` and pass it with --palw-lib")


def require_palw_library(lib_dir: Path) -> None:
    """Before anything loads it: the library exists and exports the PALW trace (RuntimeLibraryError)."""
    libllama = Path(lib_dir) / "libllama.so"
    if not libllama.is_file():
        raise RuntimeLibraryError(f"{libllama} is missing: rebuild with `palw build`")
    if PALW_SYMBOL.encode() + b"\x00" not in libllama.read_bytes():
        raise not_a_palw_library(lib_dir)


def require_undamaged(build: "RuntimeBuild") -> None:
    """Before anything loads it: a build's libraries are the bytes its manifest records, read now
    (RuntimeLibraryError in one line: a truncated library would kill the process that maps it)."""
    if build.manifest_path is None:
        return
    from pytest_palw.builder.manifest import Manifest
    from pytest_palw.errors import PalwError

    try:
        damage = Manifest.load(build.manifest_path).damage()
    except PalwError:
        return  # not a manifest this version writes: its libraries are checked as they load
    if damage is not None:
        raise RuntimeLibraryError(f"the runtime build {build.manifest_path.parent} is damaged ({damage}): build it "
                                  "again with `palw build` (the same options), which repairs it")


@dataclass(frozen=True)
class RuntimeBuild:
    """What the suite needs to know about one `palw build` output."""

    lib_dir: Path
    source_dir: Path
    runtime_dir: Path
    binding_python_path: Path | None
    variant: str
    pinned_cc: int | None
    manifest: dict = field(default_factory=dict, compare=False, repr=False)
    manifest_path: Path | None = None
    origin: str = ORIGIN_BUILD  # palw-build (a manifest says what it was made from) or brought
    tools: dict = field(default_factory=dict, compare=False)  # the seed tools: {observer, smoke} -> path or None
    observed: dict = field(default_factory=dict, compare=False, repr=False)  # a brought runtime's (brought.observe)

    @property
    def layout(self) -> RuntimeLayout:
        """What the cffi extension compiles and links against."""
        return RuntimeLayout(self.lib_dir, self.source_dir, self.runtime_dir)

    @property
    def location(self) -> Path:
        """What names this runtime to another process (a worker, a probe's child): its manifest or its libraries."""
        return self.manifest_path or self.lib_dir

    def tool_absent(self, role: str) -> str:
        """Why a seed tool case cannot run: where the tool was looked for, and the fix."""
        name, looked = TOOL_NAMES[role], self.observed.get("tools_looked_in")
        where = f"looked in {', '.join(looked)}" if looked else "the runtime manifest names none"
        return (f"no {name} for this runtime ({where}): the seed tool cases are required claims; put the tool "
                "beside the libraries or name its directory with --palw-tools")

    @classmethod
    def from_manifest(cls, path: Path, tools_dir: Path | str | None = None) -> "RuntimeBuild":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise RuntimeLibraryError(f"cannot read the runtime manifest {path} ({type(error).__name__}: "
                                      f"{str(error)[:120]}): pass the palw-manifest.json `palw build` wrote "
                                      "(`palw build --print-manifest` prints it)") from None
        if not isinstance(data, dict):
            raise RuntimeLibraryError(f"{path} is not a pytest-palw runtime manifest: pass the palw-manifest.json "
                                      "`palw build` wrote (`palw build --print-manifest` prints it)")
        try:
            lib_dir = Path(data["outputs"]["lib_dir"])
            return cls(
                lib_dir=lib_dir,
                source_dir=Path(data["source_dir"]),
                runtime_dir=recorded_runtime_dir(data["inputs"]["native"], Path(path).parent),
                binding_python_path=Path(data["binding_python_path"]) if data.get("binding_python_path") else None,
                variant=data["variant"],
                pinned_cc=data.get("pinned_cc"),
                manifest=data,
                manifest_path=Path(path),
                tools=find_tools(lib_dir, tools_dir) if tools_dir else dict(data["outputs"].get("tools") or {}),
                observed={"tools_looked_in": [str(Path(tools_dir).resolve())]} if tools_dir else {},
            )
        except KeyError as missing:
            raise RuntimeLibraryError(f"{path} lacks {missing}: it is not a pytest-palw runtime "
                                      "manifest; rebuild with `palw build`") from None

    @classmethod
    def brought(cls, location: Path, tools_dir: Path | str | None = None, headers_dir: Path | str | None = None,
                hook_sha256: str | None = None, source: Path | str | None = None) -> "RuntimeBuild":
        """A directory of PALW-patched libraries from any build (or its libllama.so), no manifest:
        refused in one line unless it exports the PALW trace with the suite's ABI (runtime/brought.py)."""
        from pytest_palw.paths import NATIVE_RUNTIME_DIR

        lib_dir = lib_dir_of(location)
        require_palw_library(lib_dir)
        observed = observe(lib_dir)
        check_abi(lib_dir, observed["request_abi"])
        check_cxx_runtime(lib_dir, observed["cxx_runtime"])
        headers, binding_copy = suite_abi_dir(source)
        observed["tools_looked_in"] = [str(Path(tools_dir).resolve())] if tools_dir else [
            str(place) for place in tool_places(lib_dir)]
        observed["device_hook"] = device_hook(headers_dir, hook_sha256)
        return cls(lib_dir=lib_dir, source_dir=headers, runtime_dir=NATIVE_RUNTIME_DIR,
                   binding_python_path=binding_copy, variant=observed["variant"], pinned_cc=None,
                   origin=ORIGIN_BROUGHT, tools=find_tools(lib_dir, tools_dir), observed=observed)

    @classmethod
    def locate(cls, location: Path, tools_dir: Path | str | None = None, headers_dir: Path | str | None = None,
               hook_sha256: str | None = None, source: Path | str | None = None) -> "RuntimeBuild":
        """A manifest file, a build dir, or a lib dir inside a build dir; else a brought directory of
        libraries (or its libllama.so). ``headers_dir`` and ``hook_sha256`` name a brought runtime's
        device hook (runtime/brought.py: device_hook); ``source`` what its ABI copy is made from (suite_abi_dir)."""
        location = Path(location).resolve()
        if location.is_file() and location.suffix == ".json":
            return cls.from_manifest(location, tools_dir)
        start = location.parent if location.is_file() else location  # a libllama.so: its directory
        for candidate in [directory / MANIFEST_NAME for directory in (start, *start.parents)][:4]:
            if candidate.is_file():
                return cls.from_manifest(candidate, tools_dir)
        return cls.brought(location, tools_dir, headers_dir, hook_sha256, source)


def recorded_runtime_dir(native: dict, build_dir: Path) -> Path:
    """The native runtime (runtime-palw/cuda) a build was compiled with: the first tree whose digest is
    the one its manifest records, of the build's own copy (``build_dir``/runtime-palw/cuda, the one
    CMake compiled: builder/api.py runtime_copy), the recorded directory, and this installation's.

    A build is cached by content, so another installation with the same sources (a wheel install,
    another clone) reuses it; the clone that built it may since be removed, or edited. With no digest
    recorded, or none of them matching, the recorded path stays, and what reads it says what is wrong.
    """
    recorded = Path(native["path"])
    if not native.get("sha256"):
        return recorded
    from pytest_palw.builder.config import RUNTIME_SUBDIR
    from pytest_palw.builder.plan import native_runtime
    from pytest_palw.paths import NATIVE_RUNTIME_DIR

    for candidate in (Path(build_dir) / RUNTIME_SUBDIR, recorded, NATIVE_RUNTIME_DIR):
        try:
            tree = native_runtime(candidate)  # a directory that is not there: the empty tree's digest
        except OSError:  # unreadable here, or changed while read: not the tree with that digest
            continue
        if tree.sha256 == native["sha256"]:
            return tree.path
    return recorded


class LogSink:
    """Receives llama/ggml log lines; tests capture them for a while (e.g. scheduler dumps)."""

    def __init__(self, llama):
        self._lines: list[str] | None = None
        self._lock = threading.Lock()
        self._partial = ""

        def on_log(level, text, _user_data):
            with self._lock:
                if self._lines is not None and text:
                    self._partial += text.decode("utf-8", "replace")
                    *complete, self._partial = self._partial.split("\n")
                    self._lines.extend(complete)

        self._callback = llama.llama_log_callback(on_log)  # keep alive: C holds the pointer
        llama.llama_log_set(self._callback, ctypes.c_void_p(0))

    @contextmanager
    def capture(self):
        with self._lock:
            self._lines, self._partial = [], ""
        lines: list[str] = []
        try:
            yield lines
        finally:
            with self._lock:
                lines.extend(self._lines + ([self._partial] if self._partial else []))
                self._lines = None


class Runtime:
    """One runtime per process: llama_cpp binds its libllama at import."""

    def __init__(self, build: RuntimeBuild):
        self.build = build
        self.llama = load_llama_cpp(build.lib_dir, build.binding_python_path)
        if not hasattr(self.llama._lib, PALW_SYMBOL):
            raise not_a_palw_library(build.lib_dir)
        self.abi = load_runtime_abi(build.layout)
        self.ffi, self.lib = self.abi.ffi, self.abi.lib
        install(self.abi)
        self.gpu_slots = None  # preflight/gpu_share.GpuSlots, set by the session: held while a context lives
        self.logs = LogSink(self.llama)
        self.llama.llama_backend_init()

    # --- backends -------------------------------------------------------------
    def palw_backend_reg(self):
        """The backend registry exposing the PALW V2 bind proc (CUDA), or None."""
        lib, ffi = self.lib, self.ffi
        for index in range(lib.ggml_backend_reg_count()):
            reg = lib.ggml_backend_reg_get(index)
            if lib.ggml_backend_reg_get_proc_address(reg, b"palw_cuda_llama_trace_bind_v2") != ffi.NULL:
                return reg
        return None

    @property
    def has_cuda_trace(self) -> bool:
        return self.palw_backend_reg() is not None

    def backend_api(self):
        """The backend API table of the CUDA backend (producer functions, encode_record)."""
        reg = self.palw_backend_reg()
        if reg is None:
            return None
        get_api = self.ffi.cast("palw_cuda_llama_mmvq_get_backend_api_v1",
                                self.lib.ggml_backend_reg_get_proc_address(
                                    reg, b"palw_cuda_llama_mmvq_get_backend_api_v1"))
        return get_api()

    # --- models ---------------------------------------------------------------
    def load_model(self, path: Path, profile=None) -> "Model":
        """``profile``: the file's profile (preflight.model_check.read_profile), read once by the caller
        that resolved the model; the cases that need the attention geometry need it."""
        llama = self.llama
        params = llama.llama_model_default_params()
        params.n_gpu_layers = INT32_MAX
        params.split_mode = llama.LLAMA_SPLIT_MODE_NONE
        params.main_gpu = 0
        params.use_mmap = True
        params.use_mlock = False
        params.check_tensors = True
        params.use_extra_bufts = False
        with self.logs.capture() as lines:
            pointer = llama.llama_model_load_from_file(str(path).encode(), params)
        if not pointer:
            reason = next((l for l in reversed(lines) if "error" in l.lower() or "failed" in l.lower()), "")
            raise ModelProfileError(
                f"llama.cpp cannot load {path} ({reason.strip() or 'no reason logged'}): the file is "
                "truncated or not a GGUF this runtime reads; regenerate it (`palw models generate`)")
        return Model(self, path, pointer, profile)


class Model:
    pointer: int | None  # None once freed

    def __init__(self, runtime: Runtime, path: Path, pointer: int, profile=None):
        self.runtime, self.path, self.pointer, self._profile = runtime, Path(path), pointer, profile
        llama = runtime.llama
        self.vocab = llama.llama_model_get_vocab(pointer)
        self.n_vocab = llama.llama_vocab_n_tokens(self.vocab)

    @property
    def profile(self):
        """The GGUF's profile (attention geometry and widths), as the loader was handed it."""
        if self._profile is None:
            raise RuntimeLibraryError(f"model {self.path} was loaded without its profile: pass "
                                      "load_model(path, read_profile(path)) (pytest_palw.preflight.model_check)")
        return self._profile

    def meta(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        length = self.runtime.llama.llama_model_meta_val_str(self.pointer, key.encode(), buffer, 256)
        return buffer.value.decode() if length >= 0 else None

    def default_token(self) -> int:
        """The smoke's select_token: decoder start, else BOS, else 0."""
        llama = self.runtime.llama
        token = llama.llama_model_decoder_start_token(self.pointer)
        if token < 0 or token >= self.n_vocab:
            token = llama.llama_vocab_bos(self.vocab)
        return token if 0 <= token < self.n_vocab else 0

    def context(self, eval_owner=None, **overrides) -> "Context":
        """A context with the smoke's pinned policy.

        ``eval_owner`` (a CallbackOwner with ``on_eval``) becomes the scheduler eval
        callback; ``overrides`` set other llama_context_params fields (misuse cases).
        """
        llama, ffi = self.runtime.llama, self.runtime.ffi
        params = llama.llama_context_default_params()
        params.n_ctx = CONTEXT_TOKENS
        params.n_batch = params.n_ubatch = params.n_seq_max = params.n_outputs_max = 1
        params.n_threads = params.n_threads_batch = 1
        params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.type_k = params.type_v = llama.GGML_TYPE_F16
        params.embeddings = False
        params.offload_kqv = True
        params.no_perf = True
        params.op_offload = True
        params.kv_unified = False
        handle = None
        if eval_owner is not None:
            handle = ffi.new_handle(eval_owner)
            params.cb_eval = llama.ggml_backend_sched_eval_callback(eval_callback_address(self.runtime.abi))
            params.cb_eval_user_data = ctypes.c_void_p(int(ffi.cast("uintptr_t", handle)))
        for name, value in overrides.items():
            setattr(params, name, value)
        slots = self.runtime.gpu_slots
        if slots is not None:
            slots.acquire()
        try:
            pointer = llama.llama_init_from_model(self.pointer, params)
            if not pointer:
                raise RuntimeLibraryError(f"llama_init_from_model failed for {self.path} with the pinned "
                                          "context policy (n_ctx 512, batch 1): see the llama log")
            return Context(self, pointer, keepalive=(handle, params), slots=slots)
        except BaseException:
            if slots is not None:
                slots.release()
            raise

    def free(self) -> None:
        if self.pointer:
            self.runtime.llama.llama_model_free(self.pointer)
            self.pointer = None


class Context:
    pointer: int | None  # None once freed

    def __init__(self, model: Model, pointer: int, keepalive=(), slots=None):
        self.model, self.pointer = model, pointer
        self._keepalive = keepalive  # the eval handle must outlive the context
        self._slots = slots  # the GPU slot this context holds (released by free)
        runtime = model.runtime
        self.llama, self.ffi, self.lib = runtime.llama, runtime.ffi, runtime.lib
        self.cptr = self.ffi.cast("struct llama_context *", pointer)

    def policy(self) -> dict[str, int]:
        llama, p = self.llama, self.pointer
        return {"n_ctx": llama.llama_n_ctx(p), "n_batch": llama.llama_n_batch(p),
                "n_ubatch": llama.llama_n_ubatch(p), "n_seq_max": llama.llama_n_seq_max(p),
                "n_threads": llama.llama_n_threads(p), "n_threads_batch": llama.llama_n_threads_batch(p)}

    def decode(self, token: int) -> int:
        tokens = (self.llama.llama_token * 1)(token)
        return self.llama.llama_decode(self.pointer, self.llama.llama_batch_get_one(tokens, 1))

    def logits(self) -> np.ndarray:
        pointer = self.llama.llama_get_logits_ith(self.pointer, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.model.n_vocab,)).copy()

    def free(self) -> None:
        if self.pointer:
            pointer, self.pointer = self.pointer, None
            try:
                self.llama.llama_free(pointer)
            finally:
                if self._slots is not None:
                    self._slots.release()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.free()
