"""The expected inventory: every case a complete certification must run and pass, known before any
case runs.

It is read from the suite's own sources, never from what pytest collected: the claim modules
(``conformance/test_*.py``), their test functions, the ``palw_<tier>`` marks and the values of
their ``parametrize`` marks (the launch indices come from the launch table, the other values from
the suite's own lists). A selection (``-k``, ``--deselect``, ``--lf``, ``-o python_functions``),
a plugin that drops or rewrites items, or a run that never reaches a case's body therefore cannot
shrink what had to pass: the verdict joins the reports against this list (verdict.py).

The suite digest binds what was tested: the conformance sources, the launch table and the rule it
derives from, the goldens, the certificate schema and the plugin's own code.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import pytest

from pytest_palw import __version__, paths
from pytest_palw.cache import sha256_bytes, sha256_file, tree_digest
from pytest_palw.marks import LAUNCH_MARK, launch_family, stream_indices
from pytest_palw.tiers import EXEMPT, tier_of

SUITE_PREFIX = "conformance/"  # the inventory names cases as a checkout's node ids do
_PARAMETER_SET = type(pytest.param(None))
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


class InventoryError(Exception):
    """The suite's sources name a case the inventory cannot enumerate (a pattern it does not know)."""


@dataclass(frozen=True)
class Family:
    """One test function of the suite and the parameter ids it must run with (None: not parametrized)."""

    function: str  # "conformance/test_x.py::test_f"
    tier: str
    params: tuple[str, ...] | None = None
    launch: tuple[str, str] | None = None  # (label, stream) of a family about one launch each (marks.each_launch)

    def ids(self) -> list[str]:
        if self.params is None:
            return [self.function]
        return [f"{self.function}[{param}]" for param in self.params]


@dataclass(frozen=True)
class Inventory:
    families: tuple[Family, ...]
    claims: dict[str, dict] = field(default_factory=dict)  # module -> {scope, claim} of its docstring

    @cached_property
    def tiers(self) -> dict[str, str]:
        """case id -> tier, every case of the suite."""
        return {case: family.tier for family in self.families for case in family.ids()}

    @cached_property
    def launches(self) -> dict[str, tuple[str, str]]:
        """function id -> (label, stream) of each family of launch cases."""
        return {family.function: family.launch for family in self.families if family.launch}

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.tiers))

    @cached_property
    def exempt(self) -> dict[str, str]:
        """case id -> why a certification does not require it to pass."""
        return {case: EXEMPT[tier] for case, tier in self.tiers.items() if tier in EXEMPT}

    @cached_property
    def required(self) -> tuple[str, ...]:
        return tuple(case for case in self.ids if case not in self.exempt)

    @cached_property
    def digest(self) -> str:
        return ids_digest(self.ids)

    def as_dict(self) -> dict:
        """The certificate's compact form: per function its tier and parameter ids (consecutive
        integers as ``a..b``); ``expand`` gives the ids back, ``sha256`` is over them sorted."""
        return {"size": len(self.ids), "required": len(self.required), "sha256": self.digest,
                "exempt": [{"id": case, "reason": reason} for case, reason in sorted(self.exempt.items())],
                "functions": [{"function": family.function, "tier": family.tier,
                               "params": None if family.params is None else compact(family.params),
                               **({"launch": dict(zip(("label", "stream"), family.launch))} if family.launch else {})}
                              for family in self.families],
                "claims": dict(self.claims)}


def ids_digest(ids) -> str:
    return sha256_bytes("".join(f"{case}\n" for case in sorted(ids)).encode())


def compact(params: tuple[str, ...]) -> list[str]:
    """Runs of consecutive integer ids as ``"a..b"``; every other id as it is."""
    out: list[str] = []
    run: list[int] = []

    def close():
        if run:
            out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
            run.clear()

    for param in params:
        if param.isdigit() and str(int(param)) == param and (not run or int(param) == run[-1] + 1):
            run.append(int(param))
            continue
        close()
        if param.isdigit() and str(int(param)) == param:
            run.append(int(param))
        elif _RANGE.match(param):
            raise InventoryError(f"parameter id {param!r} reads as a range of ids: choose another")
        else:
            out.append(param)
    close()
    return out


def expand(document: dict) -> list[str]:
    """The case ids of a certificate's compact inventory (``Inventory.as_dict``)."""
    ids = []
    for family in document["functions"]:
        if family["params"] is None:
            ids.append(family["function"])
            continue
        for param in family["params"]:
            match = _RANGE.match(param)
            values = [str(i) for i in range(int(match[1]), int(match[2]) + 1)] if match else [param]
            ids += [f"{family['function']}[{value}]" for value in values]
    return ids


# -- reading the suite ------------------------------------------------------------------------------
def build(suite_dir: Path | None = None) -> Inventory:
    """The inventory of the suite in ``suite_dir`` (the installed conformance suite by default)."""
    suite_dir = Path(suite_dir or paths.CONFORMANCE_DIR)
    families: list[Family] = []
    claims = {}
    for path in sorted(suite_dir.glob("test_*.py")):
        module = _load(path)
        claims[path.name] = dict(zip(("scope", "claim"), claim_of(path)))
        module_marks = _marks(module)
        if "pytest_generate_tests" in vars(module):
            raise InventoryError(f"{path.name} parametrizes in pytest_generate_tests, which the inventory "
                                 "cannot read: use parametrize marks")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and name.startswith("Test") and obj.__module__ == module.__name__:
                raise InventoryError(f"{path.name}::{name}: test classes are not enumerated by the "
                                     "inventory: write the cases as module-level functions")
            if not (name.startswith("test") and inspect.isfunction(obj) and obj.__module__ == module.__name__
                    and getattr(obj, "__test__", True)):
                continue
            marks = _marks(obj) + module_marks
            where = f"{path.name}::{name}"
            tier = tier_of(mark.name for mark in marks) or "cpu"  # the plugin marks an unmarked case cpu
            params = _parameter_ids(marks, where)
            families.append(Family(f"{SUITE_PREFIX}{where}", tier, params, _launch_family(marks, where)))
    if not families:
        raise InventoryError(f"no test function in {suite_dir}/test_*.py: the suite is missing")
    return Inventory(tuple(families), claims)


def _launch_family(marks, where: str) -> tuple[str, str] | None:
    """The (label, stream) of a family of launch cases: a ``palw_launch`` mark over an ``index``
    parametrized with exactly its stream's launch indices (marks.each_launch)."""
    launch_marks = [mark for mark in marks if mark.name == LAUNCH_MARK]
    if not launch_marks:
        return None
    try:
        label, stream = launch_family(launch_marks[0])
    except ValueError as error:
        raise InventoryError(f"{where}: {error}") from None
    indices = [list(mark.args[1]) for mark in marks if mark.name == "parametrize" and mark.args[0] == "index"]
    if len(launch_marks) > 1 or indices != [list(stream_indices(stream))]:
        raise InventoryError(f"{where}: a palw_launch case takes one `index` parameter over its stream's "
                             "launches: mark it with marks.each_launch only")
    return label, stream


def _load(path: Path):
    """Execute the module under a private name (pytest imports it again under its own)."""
    name = f"_palw_inventory_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InventoryError(f"{path.name} cannot be imported (no module spec): name the suite's .py files")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look a class's module up while it is made
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise InventoryError(f"{path.name} cannot be imported ({type(error).__name__}: {error})") from None
    finally:
        sys.modules.pop(name, None)
    return module


def _marks(obj) -> list:
    marks = getattr(obj, "pytestmark", [])
    return [getattr(mark, "mark", mark) for mark in (marks if isinstance(marks, list) else [marks])]


def _parameter_ids(marks, where: str) -> tuple[str, ...] | None:
    """The ids pytest gives the cases of these parametrize marks (function marks first, as pytest
    applies them), combined with '-'."""
    combined: list[str] | None = None
    for mark in marks:
        if mark.name != "parametrize":
            continue
        ids = _ids_of(mark, where)
        combined = ids if combined is None else [f"{left}-{right}" for left in combined for right in ids]
    if combined is not None and len(set(combined)) != len(combined):
        raise InventoryError(f"{where}: two cases share a parameter id: give each an explicit, unique id")
    return None if combined is None else tuple(combined)


def _ids_of(mark, where: str) -> list[str]:
    return [case for case, _ in _parameter_sets(mark, where)[1]]


def _parameter_sets(mark, where: str) -> tuple[list[str], list[tuple[str, tuple]]]:
    """A parametrize mark's argument names, and per parameter set its id and values."""
    arguments = dict(zip(("argnames", "argvalues", "indirect", "ids", "scope"), mark.args)) | mark.kwargs
    names = arguments["argnames"]
    names = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else list(names)
    given = arguments.get("ids")
    if arguments.get("indirect"):
        raise InventoryError(f"{where}: indirect parametrization hands the case a fixture's value, not the "
                             "parameter: the inventory cannot witness it; parametrize the values directly")
    if given is not None and not isinstance(given, (list, tuple)):
        raise InventoryError(f"{where}: ids= must be a list of strings for the inventory, not {type(given).__name__}")
    out = []
    for position, value in enumerate(arguments["argvalues"]):
        explicit = None
        if isinstance(value, _PARAMETER_SET):
            if value.marks:
                raise InventoryError(f"{where}: a parameter with marks ({value.marks}) is not enumerated: "
                                     "mark the function instead")
            explicit, values = value.id, tuple(value.values)
        else:
            values = (value,) if len(names) == 1 else tuple(value)
        if explicit is None and given is not None and position < len(given) and given[position] is not None:
            explicit = str(given[position])
        out.append((_id_of(explicit, where) if explicit is not None else "-".join(_id_of(v, where) for v in values),
                    values))
    if not out:
        raise InventoryError(f"{where}: an empty parametrization runs no case")
    return names, out


def _id_of(value, where: str) -> str:
    """pytest's id of one parameter value, for the kinds the suite uses."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isprintable() and "\\" not in value:
        return value
    raise InventoryError(f"{where}: parameter {value!r} has no id the inventory can name: use an int or "
                         "a plain ASCII string, or pass ids=")


def witness_id(name: str, function, module, kwargs: dict) -> str | None:
    """The inventory's id of the case that ``function`` ran as, from the values it was called with:
    ``conformance/test_x.py::test_f[param]``; None when ``function`` is not the suite function
    ``name`` of ``module`` (with its code in that module's file) or the values match no parameter
    set of its marks."""
    code = getattr(function, "__code__", None)
    if code is None or vars(module).get(name) is not function:
        return None
    source = paths.resolved(code.co_filename)
    if source != paths.resolved(getattr(module, "__file__", "") or ""):
        return None
    where = f"{source.name}::{name}"
    parts = []
    for mark in _marks(function) + _marks(module):
        if mark.name != "parametrize":
            continue
        names, sets, by_identity = _mark_sets(mark, where)
        received = tuple(kwargs.get(argument, _MISSING) for argument in names)
        # pytest hands the body the mark's own objects: matched by identity (values that compare
        # equal, 0 and False, stay apart), by equality only when a plugin copied them
        matching = by_identity.get(tuple(map(id, received)), [])
        if not matching:
            matching = [case for case, values in sets if _equal(values, received)]
        if len(matching) != 1:
            return None
        parts.append(matching[0])
    return f"{SUITE_PREFIX}{where}" + (f"[{'-'.join(parts)}]" if parts else "")


_MISSING = object()
# Per mark object, computed once: a body's id is looked up for each of its cases, and an each_launch
# mark has 361 sets (O(cases x sets) otherwise). The mark is kept with its sets so that its id is
# never another mark's, and keeps its values alive: the identity index (the ids of a set's values ->
# the ids of the sets that are those very objects) stays true while it is held.
_SETS: dict[int, tuple[object, tuple[list[str], list[tuple[str, tuple]], dict[tuple, list[str]]]]] = {}


def _mark_sets(mark, where: str) -> tuple[list[str], list[tuple[str, tuple]], dict[tuple, list[str]]]:
    held = _SETS.get(id(mark))
    if held is None or held[0] is not mark:
        names, sets = _parameter_sets(mark, where)
        by_identity: dict[tuple, list[str]] = {}
        for case, values in sets:
            by_identity.setdefault(tuple(map(id, values)), []).append(case)
        held = _SETS[id(mark)] = (mark, (names, sets, by_identity))
    return held[1]


def _equal(values: tuple, received: tuple) -> bool:
    try:
        return bool(values == received)
    except Exception:  # values whose == is no bool (arrays): only identity can match them
        return False


def claim_of(path: Path) -> tuple[str | None, str]:
    """The claim a module's docstring states: (scope, first sentence)."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    match = re.match(r"Claim(?:\s*\(([^)]*)\))?:\s*", paragraph)
    text = paragraph[match.end():] if match else paragraph
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", text)[0]
    return (match.group(1) if match else None), sentence or "(no claim in the module docstring)"


def case_id(nodeid: str, location_path: str, rootpath: Path, suite_dir: Path | None = None) -> str | None:
    """The inventory's name of a reported case, or None when the case is not in the suite.

    The file comes from the report's location (relative to the rootdir, whatever arguments named
    the suite); what follows the first ``::`` of the node id names the function and parameters.
    """
    _, separator, rest = nodeid.partition("::")
    if not separator or not location_path:
        return None
    name = _suite_module(location_path, str(rootpath), str(suite_dir or paths.CONFORMANCE_DIR))
    return None if name is None else f"{SUITE_PREFIX}{name}::{rest}"


@lru_cache(maxsize=256)
def _suite_module(location_path: str, rootpath: str, suite_dir: str) -> str | None:
    """The file name of the suite module at ``rootpath/location_path``, or None (resolved once per
    file: three reports for each of 3 075 cases)."""
    path = (Path(rootpath) / location_path).resolve()
    if path.parent != Path(suite_dir).resolve() or not path.name.startswith("test_"):
        return None
    return path.name


def parse_case_id(name: str) -> tuple[str, str, str | None]:
    """(module file, function, parameter id or None) of a case id or node id:
    ``conformance/test_x.py::test_f[3]`` -> ``("test_x.py", "test_f", "3")``."""
    path, _, rest = name.partition("::")
    function, bracket, param = rest.partition("[")
    return path.rsplit("/", 1)[-1], function, param[:-1] if bracket else None


def launch_table(model: dict | None):
    """The suite's launch table for a certificate's model widths (``document["model"]``; else the
    full profile's)."""
    from pytest_palw.fixtures.models.profiles import PROFILES, Profile
    from pytest_palw.fixtures.oracles.launch_table import expected_launches

    profile = PROFILES["full"]
    fields = (model or {}).get("profile") or {}
    if all(fields.get(name) for name in ("n_embd", "n_ff", "n_vocab")):
        widths = {name: fields[name] for name in ("n_embd", "n_ff", "n_vocab")}  # the pinned topology's table
        profile = Profile(Path((model or {}).get("path") or "model.gguf").name, **widths)
    return expected_launches(profile)


# -- what was tested --------------------------------------------------------------------------------
PLUGIN_CODE = (".py", ".h", ".c", ".cpp")  # the plugin's Python and the C it compiles (the trace's caller)


def plugin_files() -> list[Path]:
    """The plugin's own code: every source file of the package outside the suite's assets."""
    assets = [paths.CONFORMANCE_DIR, paths.FIXTURES_DIR, paths.NATIVE_DIR, paths.PATCHES_DIR]
    return sorted(path for path in paths.PACKAGE_DIR.rglob("*") if path.suffix in PLUGIN_CODE and path.is_file()
                  and "__pycache__" not in path.parts and not any(asset in path.parents for asset in assets))


def suite_digest() -> dict:
    """sha256 of each part of what a certificate's cases are made of, and of all of them together."""
    models = paths.FIXTURES_DIR
    plugin = plugin_files()
    parts = {
        "conformance": (paths.CONFORMANCE_DIR, sorted(paths.CONFORMANCE_DIR.glob("*.py"))),
        "launch_table": (models, [models / "oracles" / "launch_table.py", models / "models" / "profiles.py"]),
        "goldens": (models / "goldens", sorted((models / "goldens").rglob("*.bin"))
                    + sorted((models / "goldens").rglob("*.json"))),
        "schema": (paths.PACKAGE_DIR / "certificate", [paths.PACKAGE_DIR / "certificate" / "schema.json"]),
        "plugin": (paths.PACKAGE_DIR, plugin),
    }
    digests = {name: tree_digest(root, {path.relative_to(root).as_posix(): sha256_file(path) for path in files})
               for name, (root, files) in parts.items()}
    whole = sha256_bytes("".join(f"{name} {digest}\n" for name, digest in digests.items()).encode())
    return {"sha256": whole, "parts": digests, "plugin_version": __version__}
