"""The plugin's options: each is a command-line flag, an ini key and an environment variable.

Precedence: command line, then environment, then ini file, then the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Option:
    flag: str
    env: str
    default: str | None
    help: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


OPTIONS = (
    Option("--palw-model", "PALW_MODEL", "profile:tiny",
           "GGUF to certify, or profile:tiny|gpu|full for a synthetic Qwen3-8B-topology model"),
    Option("--palw-lib", "PALW_LIB", None,
           "a `palw build` output (dir or palw-manifest.json), or a directory of PALW-patched libraries from any "
           "build (or its libllama.so); default: this host's cached build"),
    Option("--palw-tools", "PALW_TOOLS", None,
           "the directory of the seed tools (llama-palw-observer, llama-palw-mmvq-smoke); default: the build's, "
           "or beside the libraries (the same directory, then ../bin)"),
    Option("--palw-runtime-headers", "PALW_RUNTIME_HEADERS", None,
           "a brought runtime's runtime-palw/cuda headers (palw_cuda_llama_mmvq.h, palw_cuda_producer_trace.cuh): "
           "the producer fault cases compile their toy kernel against its device hook"),
    Option("--palw-hook-sha256", "PALW_HOOK_SHA256", None,
           "for a brought runtime without --palw-runtime-headers: the sha256 of the palw_cuda_producer_trace.cuh it "
           "was built with; the suite's copy stands in only when equal"),
    Option("--palw-source", "PALW_SOURCE", None,
           "for a brought runtime: the llama-cpp-python 0.3.34 sdist or a `palw source` archive the suite's ABI copy "
           "is made from (once, into the cache); default: the cached sdist, downloaded on first use"),
    Option("--palw-token", "PALW_TOKEN", None,
           "token of the one-token decode; default: the smoke's choice (decoder start, else BOS)"),
    Option("--palw-kernel-digest", "PALW_KERNEL_DIGEST", None,
           "kernel binary sha256 (64 hex) bound into every launch; default: sha256 of the loaded "
           "libggml-cuda.so"),
    Option("--palw-certificate", "PALW_CERTIFICATE", None, "write the certificate JSON here"),
    Option("--palw-device", "PALW_DEVICE", "auto",
           "CUDA devices for xdist workers, e.g. 0,1 (worker i uses device i mod n); auto = all"),
    Option("--palw-build", "PALW_BUILD", "auto",
           "auto: build the cpu runtime when none is cached; never: fail instead"),
    Option("--palw-gpu-slots", "PALW_GPU_SLOTS", "2",
           "how many processes of this machine drive the GPU at once (a process holds a slot while it has "
           "a live llama context; beyond 2 an H200 time-slices them and slows down); 0 = no limit"),
    Option("--palw-lookahead", "PALW_LOOKAHEAD", "4",
           "threads of one process that run the runtime work of its next cases (a reject case's trace, a "
           "test-backend-ops group) while the case before them runs: one CUDA context, so their kernels overlap; "
           "0 = each case runs its own, in its call"),
)


def add_options(parser) -> None:
    group = parser.getgroup("palw", "PALW runtime certification")
    for option in OPTIONS:
        group.addoption(option.flag, dest=option.dest, default=None,
                        help=f"{option.help} [env {option.env}, ini {option.dest}]")
        parser.addini(option.dest, help=option.help, default=None)


def resolve(config, dest: str) -> str | None:
    option = next(o for o in OPTIONS if o.dest == dest)
    value = config.getoption(dest)
    if value is None:
        value = os.environ.get(option.env)
    if value is None:
        value = config.getini(dest)
    return value if value not in (None, "") else option.default


def discard_named_certificate(early_config) -> None:
    """Remove the certificate (and its page) the command line or $PALW_CERTIFICATE names, before
    anything else: only this run's verdict may stand there. (An xdist worker does it too, harmlessly:
    workers start after the controller configured and end before it writes.)"""
    chosen = getattr(early_config.known_args_namespace, "palw_certificate", None) or os.environ.get("PALW_CERTIFICATE")
    if not chosen:
        try:
            chosen = early_config.getini("palw_certificate")
        except ValueError:  # no such ini key registered: the plugin's options are not added yet
            chosen = None
    if chosen:
        from pytest_palw.certificate import discard

        discard(Path(chosen).resolve())


def explicitly_set(config) -> bool:
    """True when the user chose any PALW option (flag or environment)."""
    return any(config.getoption(o.dest) is not None or os.environ.get(o.env) for o in OPTIONS)
