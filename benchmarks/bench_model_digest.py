"""What stating the model's sha256 from the bytes of the run costs (#31): the controller hashes the
model file in a thread (cache.FileDigest) while pytest collects, so the cost on the critical path is
only what is left of the hash when the certificate is built.

    python benchmarks/bench_model_digest.py [FILE] [--collect SECONDS]

FILE defaults to the cached `profile:full` model (about 5 GB; generated when missing). Prints, for
the file's size: the sha256 alone (the first read of the run, with the page cache as it is, then
again warm), and the same hash in a thread beside a main thread busy for --collect seconds (a
stand-in for collection: Python bytecode holding the GIL), with how long the main thread then
waits for the digest and how much longer its own work took than alone.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

from pytest_palw.cache import FileDigest, sha256_file


def busy(seconds: float) -> int:
    """Python work that holds the GIL between bytecodes, for about ``seconds``; the loop count."""
    end, count = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        hashlib.sha256(b"x" * 64).digest()  # short: never releases the GIL for long
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path)
    parser.add_argument("--collect", type=float, default=5.0, help="seconds of main-thread work (default 5)")
    args = parser.parse_args()
    if args.file is None:
        from pytest_palw.fixtures.models.catalog import ensure_model

        args.file = ensure_model("full")
    size = args.file.stat().st_size
    print(f"file {args.file} ({size / 1e9:.2f} GB)")
    for label in ("first read", "warm"):
        started = time.perf_counter()
        sha256_file(args.file)
        seconds = time.perf_counter() - started
        print(f"sha256 alone, {label}: {seconds:.2f} s ({size / seconds / 1e9:.2f} GB/s)")

    alone_started = time.perf_counter()
    alone = busy(args.collect)
    alone_rate = alone / (time.perf_counter() - alone_started)

    started = time.perf_counter()
    digest = FileDigest(args.file)
    beside = busy(args.collect)
    collected = time.perf_counter()
    digest.result()
    waited = time.perf_counter() - collected
    slowdown = alone_rate / (beside / (collected - started)) - 1
    print(f"beside {args.collect:.1f} s of main-thread work: the digest was ready {waited:.2f} s after it "
          f"(critical path), the work ran {slowdown * 100:.0f} % slower; digest {digest.result()[:16]}...")


if __name__ == "__main__":
    main()
