"""House rules a test can check: the import graph's layering (docs/architecture.md), vendor calls
only in spec_hal/devices/, no vendor named in the modules that serve every vendor, no module over
MAX_MODULE_LINES lines, no table keyed by op names outside the registry, Triton's private API read
in one module, and the tested spec_hal is the installed one when tox says so."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

import spec_hal
from spec_hal.composition import builtin_descriptors

PACKAGE = Path(spec_hal.__file__).parent
#: A vendor's torch device module (``torch.<device type>``) or its ``is_<vendor>`` checks, for every
#: built-in accelerator (read from the composition root: a new vendor is covered as it is added).
_ACCELERATOR_TYPES = sorted({d.device_type for d in builtin_descriptors() if d.device_type != "cpu"})
_ACCELERATOR_NAMES = sorted(d.name for d in builtin_descriptors() if d.device_type != "cpu")
VENDOR_CALL = re.compile(
    rf"torch\.({'|'.join(_ACCELERATOR_TYPES)})\b|\.is_({'|'.join(_ACCELERATOR_TYPES)})\b"
    rf"|is_({'|'.join(_ACCELERATOR_NAMES)})\("
)


def python_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_vendor_calls_outside_devices():
    offenders = []
    for path in python_files(PACKAGE):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "devices":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if VENDOR_CALL.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == [], "vendor calls outside spec_hal/devices/:\n" + "\n".join(offenders)


def test_the_lint_catches_a_planted_vendor_call():
    assert VENDOR_CALL.search("x = torch.cuda.current_stream()")
    assert VENDOR_CALL.search("if t.is_cuda:")
    assert not VENDOR_CALL.search("device_type = 'cuda'")


#: A module past this is split by stage into a package, as ``spec_hal/ops/tree/`` is.
MAX_MODULE_LINES = 800


def long_modules(root: Path) -> list[str]:
    lengths = {path: len(path.read_text().splitlines()) for path in python_files(root)}
    return [f"{path.relative_to(root)}: {n} lines" for path, n in lengths.items() if n > MAX_MODULE_LINES]


def test_no_module_is_over_the_line_limit():
    assert long_modules(PACKAGE) == [], f"split these by stage (at most {MAX_MODULE_LINES} lines)"


def test_the_line_limit_catches_a_planted_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path) == [f"long.py: {MAX_MODULE_LINES + 1} lines"]


# --------------------------------------------------------------------------------------------------
# One place for each fact: no table keyed by op names outside the registry


def op_names() -> set[str]:
    import spec_hal.ops  # noqa: F401  (defines every op)

    return set(spec_hal.registry.ops())


def _module_statements(body: list[ast.stmt]):
    """The statements that run when a module is imported: its body, and the bodies of its ``if``,
    ``try``, ``with`` and ``class`` blocks (function bodies run later, on a call)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _module_statements(getattr(statement, field, []))
        for handler in getattr(statement, "handlers", []):
            yield from _module_statements(handler.body)


def _defined_functions(tree: ast.Module) -> set[str]:
    """The functions a module defines itself (``def``): the values a registration table may hold."""
    return {
        n.name
        for n in _module_statements(tree.body)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _is_descriptor_intents(node: ast.AST) -> bool:
    # A vendor's per-op exceptions are its descriptor's own field (DeviceDescriptor(intents=...)).
    return (
        isinstance(node, ast.Call)
        and any(k.arg == "intents" for k in node.keywords)
        and (getattr(node.func, "id", getattr(node.func, "attr", "")) == "DeviceDescriptor")
    )


def _op_strings(nodes, names: set[str]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and n.value in names]


def op_keyed_tables(source: str, names: set[str]) -> list[str]:
    """Module-level tables that hold a fact per op by op name: dicts keyed by op names (literal,
    ``dict.fromkeys`` or a comprehension over op names) and tuples, lists or sets of op names. A
    registration table, whose every value is a function the module defines (an op's conformance
    builder, a naive loop), holds no fact and passes; so does ``__all__``. Module level includes the
    blocks of ``if``, ``try``, ``with`` and ``class`` statements; ``dict(op_name=...)`` and
    ``TABLE["op_name"] = ...`` count too."""
    tree = ast.parse(source)
    functions = _defined_functions(tree)
    found = []
    for statement in _module_statements(tree.body):
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            continue
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        keyed_target = [
            t.slice.value
            for t in targets
            if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value in names
        ]
        if keyed_target:
            found.append(
                f"line {statement.lineno}: {getattr(targets[0].value, 'id', '?')} ({keyed_target[0]})"
            )
            continue
        if any(isinstance(t, (ast.Tuple, ast.List)) for t in targets):
            continue  # names unpacked one by one (short aliases of op names), not a table
        label = ", ".join(getattr(t, "id", "?") for t in targets)
        if label == "__all__":
            continue
        pending = [statement.value]
        while pending:
            node = pending.pop()
            if _is_descriptor_intents(node):
                pending.extend(a for a in node.args)
                pending.extend(k.value for k in node.keywords if k.arg != "intents")
                continue
            keyed: list[str] = []
            if isinstance(node, ast.Dict):
                keyed = _op_strings(node.keys, names)
                registers = all(isinstance(v, ast.Name) and v.id in functions for v in node.values)
                if keyed and registers:
                    keyed = []
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                keyed = _op_strings(node.elts, names)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
                keyed = [k.arg for k in node.keywords if k.arg in names]
            if keyed:
                found.append(
                    f"line {statement.lineno}: {label} ({', '.join(keyed[:3])}{', ...' if len(keyed) > 3 else ''})"
                )
                break
            pending.extend(ast.iter_child_nodes(node))
    return found


def test_no_table_keyed_by_op_names_outside_the_registry():
    """A fact about an op is an attribute of the op object or of its provider's, launcher's or
    builder's registration, never a table keyed by op names that tests must keep in step."""
    names = op_names()
    offenders = [
        f"{path.relative_to(PACKAGE)} {table}"
        for path in python_files(PACKAGE)
        if path.relative_to(PACKAGE).parts[0] != "registry"
        for table in op_keyed_tables(path.read_text(), names)
    ]
    assert offenders == [], "make these facts attributes of the op or of its registration"


def test_the_op_table_rule_catches_planted_tables():
    names = {"fast_topk", "move_kv_cache"}
    planted = """
SIZES = {"fast_topk": [1], "other": []}
WALKS = ("fast_topk",)
REASONS = dict.fromkeys(["move_kv_cache"], "why")
BY_COMPREHENSION = {op: 1 for op in ("fast_topk", "move_kv_cache")}
def build_fast_topk(device): ...
def build_move_kv_cache(device): ...
BUILDERS = {"fast_topk": build_fast_topk, "move_kv_cache": build_move_kv_cache}
NOT_OPS = {"bs": 1}
__all__ = ["fast_topk"]
DESCRIPTOR = DeviceDescriptor(name="v", intents={"fast_topk": Intent("portable", "why")})
NESTED = DeviceDescriptor(name="v", notes=("fast_topk",))
A1, A2 = "fast_topk", "move_kv_cache"
from .reasons import WHY
IMPORTED_VALUES = {"fast_topk": WHY}
if True:
    IN_A_BLOCK = {"fast_topk": 1}
class Holder:
    IN_A_CLASS = ("move_kv_cache",)
BY_KEYWORD = dict(fast_topk=4)
SIZES["move_kv_cache"] = [2]
def later():
    LOCAL = {"fast_topk": 1}  # runs on a call: not a module table
"""
    found = op_keyed_tables(planted, names)
    assert [entry.split(":")[1].split("(")[0].strip() for entry in found] == [
        "SIZES",
        "WALKS",
        "REASONS",
        "BY_COMPREHENSION",
        "NESTED",
        "IMPORTED_VALUES",
        "IN_A_BLOCK",
        "IN_A_CLASS",
        "BY_KEYWORD",
        "SIZES",
    ]


@pytest.mark.skipif(
    os.environ.get("SPEC_HAL_EXPECT_INSTALLED") != "1", reason="only under tox (installed wheel)"
)
def test_installed_wheel_is_what_is_tested():
    source = Path(os.environ["SPEC_HAL_SOURCE_TREE"]).resolve()
    assert PACKAGE.resolve() != source / "spec_hal", (
        f"tests import the source tree ({PACKAGE}), not the wheel"
    )
    assert "site-packages" in PACKAGE.parts


# --------------------------------------------------------------------------------------------------
# The import graph: every import of the package, function-level (lazy) ones included.

#: The only module kernels may import from outside ``spec_hal/kernels/``: constants, a leaf.
LEAF_CONSTANTS = "spec_hal._constants"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from pkg import name`` depends on ``pkg.name``
    when that is a module, else on ``pkg``; any other target on the longest module prefixing it."""
    files = {module_name(p, root): p for p in python_files(root)}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")[: None if is_package else -1]
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [
                    f"{origin}.{a.name}" if f"{origin}.{a.name}" in files else origin for a in node.names
                ]
            else:
                continue
            for target in targets:
                if target != "spec_hal" and not target.startswith("spec_hal."):
                    continue
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def under(module: str, package: str) -> bool:
    return module == f"spec_hal.{package}" or module.startswith(f"spec_hal.{package}.")


def reachable(graph: dict[str, set[str]], starts: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module."""
    found = []
    for module in graph:
        component = {m for m in reachable(graph, [module]) if module in reachable(graph, [m])}
        if len(component) > 1 and component not in found:
            found.append(component)
    return found


def vendor_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "devices" and not parts[2].startswith("_") else None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_import_graph_sees_lazy_imports(tmp_path):
    package = tmp_path / "spec_hal"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "registry.py").write_text("")
    (package / "kernels" / "__init__.py").write_text("")
    (package / "kernels" / "k.py").write_text("def f():\n    from .. import registry\n")
    assert import_graph(package)["spec_hal.kernels.k"] == {"spec_hal.registry"}


def test_no_import_circle(graph):
    assert circles(graph) == []


def test_ops_reach_neither_devices_nor_kernels(graph):
    ops = [m for m in graph if under(m, "ops")]
    assert sorted(m for m in reachable(graph, ops) if under(m, "devices") or under(m, "kernels")) == []


def test_kernels_import_nothing_outside_kernels_but_the_constants_leaf(graph):
    assert graph[LEAF_CONSTANTS] == set(), "the constants module must stay a leaf"
    outside = sorted(
        f"{m} -> {t}"
        for m in graph
        if under(m, "kernels")
        for t in graph[m]
        if not under(t, "kernels") and t != LEAF_CONSTANTS
    )
    assert outside == []


def test_the_registry_imports_no_vendor(graph):
    registry_modules = [m for m in graph if under(m, "registry")]
    assert sorted(f"{m} -> {t}" for m in registry_modules for t in graph[m] if under(t, "devices")) == []


def test_no_vendor_package_imports_another(graph):
    assert (
        sorted(
            f"{m} -> {t}"
            for m in graph
            for t in graph[m]
            if vendor_of(m) and vendor_of(t) and vendor_of(m) != vendor_of(t)
        )
        == []
    )


def test_the_rules_catch_a_planted_breach():
    planted = {
        "spec_hal.ops.x": {"spec_hal.registry"},
        "spec_hal.registry": {"spec_hal.devices.cuda"},
        "spec_hal.devices.cuda": {"spec_hal.ops.x"},
    }
    assert circles(planted) == [set(planted)]
    assert "spec_hal.devices.cuda" in reachable(planted, ["spec_hal.ops.x"])


# --------------------------------------------------------------------------------------------------
# A vendor fact is a field of the vendor's descriptor: the modules that serve every vendor alike
# name none (promise 8 of the design).

#: The modules that serve every vendor alike (relative to the package).
VENDOR_NEUTRAL = ("cli.py", "aot.py", "bench", "demo", "conformance")
#: torch's device type of host tensors, which the CPU vendor is also named.
HOST_DEVICE_TYPE = "cpu"


def vendor_neutral_files(root: Path = PACKAGE) -> list[Path]:
    return [
        path
        for name in VENDOR_NEUTRAL
        for path in ([root / name] if name.endswith(".py") else python_files(root / name))
    ]


def builtin_vendor_names() -> set[str]:
    from spec_hal.composition import builtin_descriptors

    return {descriptor.name for descriptor in builtin_descriptors()}


def _constants(node: ast.AST) -> set[int]:
    return {id(c) for c in ast.walk(node) if isinstance(c, ast.Constant)}


def vendor_literals(source: str, vendors: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string constant of ``source`` that is a name of ``vendors``, except where
    the name means something else: Triton's backend (a ``Target``'s backend, or compared with a
    ``.backend``) and, for ``"cpu"``, torch's device type (``torch.device("cpu")``, a ``device=``
    argument, or compared with a ``.type`` or ``.device_type``)."""
    tree = ast.parse(source)
    backends: set[int] = set()
    device_types: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == "Target":
                backends |= {id(a) for a in node.args[1:2]}
                backends |= {id(k.value) for k in node.keywords if k.arg == "backend"}
            if called == "device":
                device_types |= {id(a) for a in node.args}
            device_types |= {id(k.value) for k in node.keywords if k.arg == "device"}
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            attributes = {o.attr for o in operands if isinstance(o, ast.Attribute)}
            constants = set().union(*map(_constants, operands))
            if "backend" in attributes:
                backends |= constants
            if attributes & {"type", "device_type"}:
                device_types |= constants
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.split(":")[0] in vendors  # "cuda:0" names the vendor too
        and id(node) not in backends
        and not (node.value.split(":")[0] == HOST_DEVICE_TYPE and id(node) in device_types)
    )


def test_no_vendor_is_named_in_the_modules_that_serve_every_vendor():
    assert all((PACKAGE / name).exists() for name in VENDOR_NEUTRAL), "a module of VENDOR_NEUTRAL moved"
    vendors = builtin_vendor_names()
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line}: {name!r}"
        for path in vendor_neutral_files()
        for line, name in vendor_literals(path.read_text(), vendors)
    ]
    assert offenders == [], "a vendor fact is a field of its DeviceDescriptor:\n" + "\n".join(offenders)


def test_the_vendor_rule_catches_a_planted_vendor_name():
    planted = "\n".join(
        [
            'EVIDENCE = {"cuda": ("hardware",)}',  # a table keyed by vendor
            'if descriptor.name != "cpu": pass',  # the CPU vendor, not the device type
            'if device.type == "cuda": pass',  # a vendor's device type is the vendor
            'target = Target("gfx942", "hip", "gfx942", 64)',  # Triton's backend, not a vendor
            'if target.backend == "cuda": pass',
            'on_host = device.type == "cpu" or descriptor.device_type in ("cpu", "meta")',  # torch's type
            'where = torch.device("cpu")',
            'mask = torch.zeros(4, device="cpu")',
            'first = torch.device("cuda:0")',  # a vendor's device, by index
        ]
    )
    assert vendor_literals(planted, {"cuda", "hip", "cpu"}) == [
        (1, "cuda"),
        (2, "cpu"),
        (3, "cuda"),
        (9, "cuda:0"),
    ]


def vendor_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a vendor package by the modules that serve every vendor (they read descriptors)."""
    neutral = [f"spec_hal.{name.removesuffix('.py').replace('/', '.')}" for name in VENDOR_NEUTRAL]
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if any(module == n or module.startswith(n + ".") for n in neutral)
        for target in targets
        if vendor_of(target)
    )


def test_the_modules_that_serve_every_vendor_import_no_vendor_package(graph):
    assert vendor_imports(graph) == []
    planted = {"spec_hal.bench.sweep": {"spec_hal.devices.cuda", "spec_hal.registry"}}
    assert vendor_imports(planted) == ["spec_hal.bench.sweep imports spec_hal.devices.cuda"]


# --------------------------------------------------------------------------------------------------
# Triton's private API is read in one module, which gates itself on the Triton releases it knows

#: The one module that reads Triton's private API (and decides when launches may rely on it).
TRITON_INTERNALS_MODULE = "kernels/triton/launch.py"
#: Names of Triton's private API that spec_hal reads: attributes of a JIT function, a compiled kernel
#: or its launcher, the launch hooks' chain, and the JIT's binder maker.
TRITON_PRIVATE = re.compile(
    r"\b(device_caches|packed_metadata|_pack_args|create_function_from_signature|HookChain|"
    r"launch_enter_hook|launch_exit_hook|global_scratch_size|profile_scratch_size)\b"
)


def triton_private_reads(root: Path = PACKAGE) -> list[str]:
    """``file:line`` of each name of Triton's private API outside the internals module (comments
    and docstrings included: a mention elsewhere is a read waiting to happen, or a stale doc)."""
    found = []
    for path in python_files(root):
        relative = path.relative_to(root).as_posix()
        if relative == TRITON_INTERNALS_MODULE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if TRITON_PRIVATE.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_tritons_private_api_is_read_in_one_module():
    assert triton_private_reads() == []
    assert TRITON_PRIVATE.search((PACKAGE / TRITON_INTERNALS_MODULE).read_text())  # the rule still bites


def test_the_triton_internals_rule_catches_a_planted_read(tmp_path):
    (tmp_path / "aot.py").write_text("binder = jit_fn.device_caches[0][-1]\n")
    (tmp_path / "kernels" / "triton").mkdir(parents=True)
    (tmp_path / TRITON_INTERNALS_MODULE).write_text("binder = jit_fn.device_caches[0][-1]\n")
    assert triton_private_reads(tmp_path) == ["aot.py:1: binder = jit_fn.device_caches[0][-1]"]
