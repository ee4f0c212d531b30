"""The engine of `palw mutants`: apply a mutant (in place or to a copy), rebuild what it reaches,
run the tier's suite, judge the run against the unmutated baseline, print the table and the score.

What is mutated is catalog.py's; what every tier run loads to report its failures is plugin.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_palw.cache import sha256_file
from pytest_palw.errors import BuildError, PalwError
from pytest_palw.mutants import plugin
from pytest_palw.mutants.catalog import Mutant, select
from pytest_palw.paths import CONFORMANCE_DIR, FIXTURES_DIR, NATIVE_RUNTIME_DIR, PROJECT_ROOT, cache_dir

CATALOG = "pytest_palw/mutants/catalog.py"  # named in errors: where a mutant is fixed


# -- the tiers that judge --------------------------------------------------------------------------

@dataclass(frozen=True)
class Tier:
    name: str
    unit_tests: tuple[str, ...]  # run with the conformance suite; paths relative to the checkout
    marker: str | None  # -m expression, None: every case
    model: str

    def selection(self) -> list[str]:
        """pytest arguments: the conformance suite and the unit tests (those a checkout has)."""
        units = [str(PROJECT_ROOT / path) for path in self.unit_tests if (PROJECT_ROOT / path).exists()]
        return [str(CONFORMANCE_DIR), *units, *(["-m", self.marker] if self.marker else [])]


TIERS = {
    "cpu": Tier("cpu", (
        # the host ABI (header validators, launch contract, codec) the CPU tier compiles
        "tests/native", "tests/runtime/test_codec_cross_check.py",
        # the generator and the launch table against llama.cpp's quantizer
        "tests/fixtures/oracles/test_q4_k_m_oracle.py", "tests/fixtures/models/test_gguf_qwen3_layout.py"),
        # A conformance case carries a palw_* tier marker (the plugin gives unmarked ones palw_cpu),
        # a unit test none: this is `-m palw_cpu` on conformance and all of the unit tests.
        "palw_cpu or not (palw_gpu or palw_pinned or palw_metal)", "profile:tiny"),
    "gpu": Tier("gpu", (), None, "profile:full"),
}


# -- applying a mutant -----------------------------------------------------------------------------

def mutant_roots(manifest: dict) -> dict[str, Path]:
    native = manifest.get("inputs", {}).get("native", {}).get("path")
    return {"source": Path(manifest["source_dir"]), "native": Path(native) if native else None}


def anchor_count(mutant: Mutant, root: Path) -> int:
    path = root / mutant.path
    return path.read_text().count(mutant.old) if path.is_file() else 0


def apply(mutant: Mutant, roots: dict[str, Path]) -> tuple[Path, str]:
    """Edit the file; returns (path, original text) for restore()."""
    path = roots[mutant.root] / mutant.path
    count = anchor_count(mutant, roots[mutant.root])
    if count != 1:
        raise PalwError(f"mutant {mutant.name}: the anchor occurs {count} times in {path} (expected "
                        f"once): the runtime changed; update {CATALOG}")
    text = path.read_text()
    path.write_text(text.replace(mutant.old, mutant.new))
    return path, text


def is_pristine(source_dir: Path) -> bool:
    """Every cpu patched-tree mutant's anchor occurs exactly once: no edit is left in the tree."""
    return all(anchor_count(mutant, source_dir) == 1 for mutant in select("cpu", root="source"))


@contextmanager
def cpu_copy(mutant: Mutant, env: dict, options: list[str], build=None):
    """A cpu mutant of ``native`` or ``fixtures``: yields (env, options) of a tier run that uses
    the mutated copy; the original stays untouched. ``build``: compile the host ABI for it first."""
    if mutant.root == "native":
        # A stable path: the host ABI's compiled module is keyed by it, so reruns reuse it.
        copy = cache_dir("mutant-builds") / "native" / mutant.name / "cuda"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(NATIVE_RUNTIME_DIR, copy)
        apply(mutant, {"native": copy})
        env = dict(env, PALW_HOST_ABI_DIR=str(copy))
        if build is not None:
            compile_host_abi_for(mutant, build, env)
        yield env, options
        return
    with tempfile.TemporaryDirectory(prefix=f"palw-mutant-{mutant.name}-") as scratch:
        scratch = Path(scratch)
        copy = scratch / "fixtures"
        # goldens too: paths.FIXTURES_DIR follows the package, i.e. this copy, in the run.
        shutil.copytree(FIXTURES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
        apply(mutant, {"fixtures": copy})
        # plugin.py (in every tier run) imports the copy when these are set.
        yield dict(env, **{plugin.FIXTURES_ENV: str(copy), plugin.MODELS_ENV: str(scratch / "models")}), options


# -- building --------------------------------------------------------------------------------------

def rebuild_targets(manifest: dict) -> list[str]:
    """The libraries and the build's tools (a tool's binary is its target's name): a mutant of a
    tool's source must reach its binary, and a restored one must leave it unmutated."""
    tools = manifest.get("outputs", {}).get("tools", {})
    return ["llama", "ggml", *sorted(Path(tool).name for tool in tools.values() if tool)]


RECORDED_TOOLS = ("CMAKE_COMMAND", "CMAKE_MAKE_PROGRAM", "PALW_CUDA_RUNTIME_DIR")


def recorded_tools(build_dir: Path) -> dict[str, str]:
    """The cmake and ninja a build tree was configured with (its CMakeCache.txt, absolute paths)."""
    found = {}
    for line in (Path(build_dir) / "CMakeCache.txt").read_text(errors="replace").splitlines():
        name, _, value = line.partition("=")
        if name.split(":")[0] in RECORDED_TOOLS:
            found[name.split(":")[0]] = value
    return found


def configure_here(build_dir: Path, runtime_dir: Path | None = None) -> str | None:
    """A build tree that points where nothing is any more (a cached build outlives the virtual
    environment and the checkout that configured it: its cmake, its ninja, its PALW_CUDA_RUNTIME_DIR)
    is configured again in place, its objects kept, with this environment's tools and ``runtime_dir``
    (the producer tree the build's cache key was computed from, when the caller knows it). Returns the
    line said, None when nothing had to change; BuildError when it fails."""
    build_dir = Path(build_dir)
    recorded = recorded_tools(build_dir)
    gone = [path for name, path in recorded.items() if name != "PALW_CUDA_RUNTIME_DIR" and not Path(path).is_file()]
    moved = (runtime_dir is not None and "PALW_CUDA_RUNTIME_DIR" in recorded
             and Path(recorded["PALW_CUDA_RUNTIME_DIR"]).resolve() != Path(runtime_dir).resolve())
    if not gone and not moved:
        return None
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    if cmake is None or ninja is None:
        raise BuildError(f"{build_dir} was configured with {', '.join(gone)}, which are gone, and no cmake and "
                         "ninja are on PATH: install them (pip install cmake ninja) and rerun")
    changes = ([f"its {', '.join(gone)} gone: with {cmake} and {ninja}"] if gone else []) + (
        [f"its producer tree {recorded['PALW_CUDA_RUNTIME_DIR']} is not {runtime_dir}"] if moved else [])
    said = f"palw: mutants: configuring {build_dir} again ({'; '.join(changes)})"
    print(said, file=sys.stderr, flush=True)
    home = next((line.split("=", 1)[1] for line in (build_dir / "CMakeCache.txt").read_text().splitlines()
                 if line.startswith("CMAKE_HOME_DIRECTORY:")), None)
    result = subprocess.run([cmake, *(["-S", home] if home else []), "-B", str(build_dir),
                             f"-DCMAKE_MAKE_PROGRAM={ninja}",
                             *([f"-DPALW_CUDA_RUNTIME_DIR={runtime_dir}"] if moved else [])],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"configuring {build_dir} again failed: remove it and rerun (a new build is made):\n"
                         f"{(result.stdout + result.stderr)[-3000:]}")
    return said


def own_runtime_dir(build) -> Path:
    """The producer tree the private build compiles: its own copy (builder/api.py: runtime_copy) of this
    package's tree, the one its cache key was taken from. Configured to it once, the build no longer
    follows the checkout that made it."""
    from pytest_palw.builder.api import runtime_copy
    from pytest_palw.builder.plan import native_runtime

    return runtime_copy(NATIVE_RUNTIME_DIR, Path(build.manifest_path).parent, native_runtime(NATIVE_RUNTIME_DIR).sha256)


def rebuild(build_dir: Path, targets: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(["ninja", "-C", str(build_dir), *targets], capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"incremental rebuild failed in {build_dir}:\n{result.stdout[-3000:]}")
    return time.perf_counter() - start


def record_outputs(manifest_path: Path) -> None:
    """After an in-place rebuild: the manifest states the libraries' sha256 as they are now (a
    mutant's, then the restored ones), so the tier run judges the mutated runtime instead of
    stopping at the plugin's damage check (the digest of the file it maps, read in that run)."""
    from pytest_palw.builder.manifest import Manifest

    manifest = Manifest.load(manifest_path)
    manifest.outputs["libllama_sha256"] = sha256_file(manifest.libllama)
    for entry in manifest.outputs["ggml_libs"]:
        if entry.get("sha256"):
            entry["sha256"] = sha256_file(Path(entry["path"]))
    manifest.write(Path(manifest_path))


def private_cpu_build() -> Path:
    """A CPU build of our own to mutate in place: the plugin's default runtime stays untouched."""
    from pytest_palw.builder import api

    print("palw: mutants: the patched-tree mutants edit a private CPU build (made once, ~5 min on "
          "2 cores)", file=sys.stderr, flush=True)
    manifest = api.build("cpu", build_root=cache_dir("mutant-builds"))
    if not is_pristine(Path(manifest.source_dir)):
        # A run killed mid-mutation left an edit behind: start again from the patched tree.
        print("palw: mutants: the private build holds a leftover mutation; rebuilding it",
              file=sys.stderr, flush=True)
        manifest = api.build("cpu", build_root=cache_dir("mutant-builds"), force=True)
    return Path(manifest.path)


def compile_host_abi(lib_dir: str, source_dir: str, runtime_dir: str) -> None:
    """The cffi modules of the host ABI in $PALW_HOST_ABI_DIR, compiled and cached (in a child)."""
    from pytest_palw.runtime.binding.hostabi import load_host_abi
    from pytest_palw.runtime.binding.runtime_abi import RuntimeLayout, load_runtime_abi

    load_host_abi()
    load_runtime_abi(RuntimeLayout(Path(lib_dir), Path(source_dir), Path(runtime_dir)))


def compile_host_abi_for(mutant: Mutant, build, env: dict) -> None:
    """Before the tier run, so that the compile (about a minute on 2 cores, once per mutant: the
    modules are cached) does not count against its timeout."""
    code = f"import sys; from {__name__} import compile_host_abi; compile_host_abi(*sys.argv[1:])"
    result = subprocess.run([sys.executable, "-c", code, str(build.lib_dir), str(build.source_dir),
                             str(build.runtime_dir)], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise PalwError(f"mutant {mutant.name}: the mutated host ABI does not compile; fix the "
                        f"mutant in {CATALOG}:\n{result.stderr[-2000:]}")


# -- running a tier ----------------------------------------------------------------------------------

@dataclass
class TierRun:
    label: str
    seconds: float
    returncode: int | None  # None: killed at the timeout
    failed: set[str] | None  # None: no report was written
    log: Path
    last_line: str = ""
    stopped: bool = False  # pytest stopped at --maxfail


def run_tier(tier: Tier, label: str, options: list[str], workers: int, out: Path, env: dict,
             timeout: float | None, maxfail: int | None = None) -> TierRun:
    """Every case of ``tier``, in a process group of its own (killed whole at the timeout);
    ``maxfail``: pytest stops after that many failures."""
    report, log = out / f"{tier.name}-{label}.json", out / f"{tier.name}-{label}.log"
    report.unlink(missing_ok=True)
    args = [sys.executable, "-m", "pytest", *tier.selection(), f"--palw-model={tier.model}", *options,
            # One line per failure: full tracebacks of hundreds of failing records take minutes.
            "-q", "--tb=line", "-p", "no:cacheprovider", "-p", plugin.__name__]
    if workers > 1:
        args += ["-n", str(workers)]
    if maxfail is not None:
        args.append(f"--maxfail={maxfail}")
    start = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(args, cwd=PROJECT_ROOT, env=dict(env, **{plugin.REPORT_ENV: str(report)}),
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    reported = json.loads(report.read_text()) if report.is_file() and returncode is not None else None
    return TierRun(label, time.perf_counter() - start, returncode,
                   set(reported["failed"]) if reported is not None else None,
                   log, lines[-1].strip() if lines else "", bool(reported and reported.get("stopped")))


# -- judging ---------------------------------------------------------------------------------------

NORMAL_EXITS = (0, 1)  # pytest: all passed / some failed
MAXFAIL_EXIT = 2  # pytest's INTERRUPTED: what xdist exits with when --maxfail stops it


def judge(mutant: Mutant, run: TierRun, baseline: TierRun, seconds: float) -> dict:
    """killed: a case fails (or the session stops) that did not in the baseline; inconclusive: the
    run ended by timeout, left no report, or stopped at --maxfail on the baseline's failures alone
    (the cases after them never ran); else survived."""
    new_failures: list[str] = []
    if run.returncode is None:
        verdict, note = "inconclusive", f"timed out after {run.seconds:.0f} s"
    else:
        new_failures = sorted((run.failed or set()) - (baseline.failed or set()))
        # xdist ends a run stopped at --maxfail as interrupted (2): that is the stop, not a crash
        normal = NORMAL_EXITS + ((MAXFAIL_EXIT,) if run.stopped else ())
        if run.returncode not in normal and run.returncode != baseline.returncode:
            new_failures.append(f"<session stopped: exit code {run.returncode}: {run.last_line}>")
        if new_failures:
            verdict, note = "killed", ""
        elif run.failed is None:
            verdict, note = "inconclusive", f"no report (exit code {run.returncode}; see {run.log})"
        elif run.stopped:
            verdict, note = "inconclusive", f"stopped at --maxfail by the baseline's failures (see {run.log})"
        else:
            verdict, note = "survived", ""
    shown = ", ".join(new_failures[:3]) + (f" (+{len(new_failures) - 3} more)" if len(new_failures) > 3 else "")
    print(f"{verdict.upper():<12} {mutant.name}: {mutant.claim}"
          + (f"; new failures: {shown}" if new_failures else "") + (f"; {note}" if note else "")
          + f" ({seconds:.0f} s)", flush=True)
    return {"mutant": mutant.name, "tier": mutant.tier, "claim": mutant.claim, "root": mutant.root,
            "seconds": round(seconds, 1), "verdict": verdict, "new_failures": new_failures, "note": note,
            "log": str(run.log)}


@dataclass
class Judge:
    """Runs the baseline once, then judges each mutant against it. A mutant's run stops at its first
    failure beyond the baseline's count (``--maxfail``: one new failure kills it, so the cases after
    it cannot change the verdict); ``every_failure`` runs the whole tier and lists each new failure."""

    tier: Tier
    options: list[str]
    workers: int
    out: Path
    env: dict
    timeout: float | None
    every_failure: bool = False
    baseline: TierRun | None = None
    results: list[dict] = field(default_factory=list)

    def run_baseline(self) -> None:
        print(f"palw: mutants: {self.tier.name} tier, unmutated (the baseline)", file=sys.stderr, flush=True)
        run = run_tier(self.tier, "baseline", self.options, self.workers, self.out, self.env, None)
        if run.returncode not in NORMAL_EXITS or run.failed is None:
            raise PalwError(f"the unmutated {self.tier.name} tier did not run through (exit code "
                            f"{run.returncode}: {run.last_line}); see {run.log} and fix that before judging mutants")
        if run.failed:
            print(f"palw: mutants: warning: {len(run.failed)} case(s) fail unmutated "
                  f"({', '.join(sorted(run.failed)[:3])}"
                  "...); mutants are judged by the other cases", file=sys.stderr, flush=True)
        self.baseline = run
        if self.timeout is None:  # a mutant may be slower (rebuilt parts, regenerated models)
            self.timeout = max(180.0, 3 * run.seconds)
        print(f"palw: mutants: baseline {run.seconds:.0f} s, {len(run.failed)} failing; a mutant run "
              f"times out after {self.timeout:.0f} s", file=sys.stderr, flush=True)

    def judge(self, mutant: Mutant, env: dict | None = None, options: list[str] | None = None,
              started: float | None = None) -> None:
        start = started if started is not None else time.perf_counter()
        maxfail = None if self.every_failure else len(self.baseline.failed) + 1
        run = run_tier(self.tier, f"mutant-{mutant.name}", options if options is not None else self.options,
                       self.workers, self.out, env if env is not None else self.env, self.timeout, maxfail)
        self.results.append(judge(mutant, run, self.baseline, time.perf_counter() - start))


def run_in_place(judge_: Judge, mutants: list[Mutant], build, runtime_dir: Path | None = None) -> None:
    """Edit the build's own sources, rebuild incrementally, run the tier; restore at the end.
    ``runtime_dir``: the producer tree the build must compile against (configure_here)."""
    roots = mutant_roots(build.manifest)
    build_dir = Path(build.manifest_path).parent / "build"
    targets = rebuild_targets(build.manifest)
    configure_here(build_dir, runtime_dir)
    try:
        for mutant in mutants:
            path, original = apply(mutant, roots)
            start = time.perf_counter()
            try:
                rebuild(build_dir, targets)
                record_outputs(build.manifest_path)
                judge_.judge(mutant, started=start)
            finally:
                path.write_text(original)
    finally:
        rebuild(build_dir, targets)  # the unmutated runtime again
        record_outputs(build.manifest_path)


# -- the report --------------------------------------------------------------------------------------

def score(results: list[dict], tier: str) -> dict:
    counts = {verdict: sum(r["verdict"] == verdict for r in results)
              for verdict in ("killed", "survived", "inconclusive")}
    judged = len(results) - counts["inconclusive"]
    return {"tier": tier, "total": len(results), **counts,
            "score": round(counts["killed"] / judged, 4) if judged else None}


def print_table(results: list[dict], summary: dict) -> None:
    width = max((len(r["mutant"]) for r in results), default=6)
    print(f"\n{'mutant':<{width}}  {'verdict':<12}  {'seconds':>7}  first new failure")
    for r in results:
        print(f"{r['mutant']:<{width}}  {r['verdict']:<12}  {r['seconds']:>7.0f}  "
              f"{(r['new_failures'] or [r['note']])[0]}")
    ratio = f"{summary['score']:.0%}" if summary["score"] is not None else "n/a"
    print(f"{summary['tier']} mutation score: {summary['killed']}/{summary['total'] - summary['inconclusive']} "
          f"killed ({ratio}); {summary['total']} mutants: {summary['killed']} killed, {summary['survived']} "
          f"survived, {summary['inconclusive']} inconclusive")


# -- one `palw mutants` run ----------------------------------------------------------------------------

def run(tier_name: str, *, lib: str | None = None, model: str | None = None, only: list[str] | None = None,
        workers: int | None = None, timeout: float | None = None, out: str = "palw-mutants",
        json_path: str | None = None, every_failure: bool = False) -> int:
    """Judge the tier's mutants (``only``: those named); exit status 0 every mutant killed, 1 one
    survived, 2 none survived but some were inconclusive."""
    from pytest_palw.runtime.library import RuntimeBuild

    tier = TIERS[tier_name]
    chosen = select(tier_name, only)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if model:
        tier = replace(tier, model=model)
    workers = workers or (2 if tier_name == "cpu" else 4)
    if tier_name == "cpu":
        build = RuntimeBuild.locate(Path(lib) if lib else private_cpu_build())
    elif lib is None:
        raise PalwError("gpu mutants rebuild a finished cuda build in place: pass --lib MANIFEST")
    else:
        build = RuntimeBuild.locate(Path(lib))
    options = [f"--palw-lib={build.manifest_path}"]
    # Run from inside a pytest worker (tests/mutants), its per-process variables must not leak.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    if tier_name == "cpu":  # the unit tests' runtime (the oracle's quantizer): the tier's own
        env["PALW_TEST_LIB_DIR"] = str(build.lib_dir)
        if build.binding_python_path:
            env["PALW_TEST_BINDING_PATH"] = str(build.binding_python_path)
    else:  # the digest of the unmutated library (the file the plugin maps), so only the mutation differs
        library = sorted(build.lib_dir.glob("libggml-cuda.so*"))[0]
        options.append(f"--palw-kernel-digest={sha256_file(library)}")
    judge_ = Judge(tier, options, workers, out, env, timeout, every_failure)
    judge_.run_baseline()
    if tier_name == "cpu":
        for mutant in (m for m in chosen if m.root in ("native", "fixtures")):
            start = time.perf_counter()
            with cpu_copy(mutant, env, options, build) as (mutant_env, mutant_options):
                judge_.judge(mutant, mutant_env, mutant_options, started=start)
        in_place = [m for m in chosen if m.root == "source"]
    else:
        in_place = chosen
    if in_place:
        # Our private build's cache key is this package's producer tree: compile against the build's own
        # copy of it (made from this package's for a build cached before builds kept one), wherever the
        # checkout that made the cached build was.
        run_in_place(judge_, in_place, build, own_runtime_dir(build) if tier_name == "cpu" and not lib else None)
    summary = score(judge_.results, tier_name)
    print_table(judge_.results, summary)
    if json_path:
        Path(json_path).write_text(json.dumps({"score": summary, "baseline_seconds": round(judge_.baseline.seconds, 1),
                                               "baseline_failures": sorted(judge_.baseline.failed),
                                               "mutants": judge_.results}, indent=2) + "\n")
    if summary["survived"]:
        return 1
    return 2 if summary["inconclusive"] else 0
