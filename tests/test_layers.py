"""The package layers: kernels -> engine -> cluster, checked from the source, not from memory.

* import-linter runs the contracts declared in pyproject.toml ([tool.importlinter]):
  layers cluster > engine > kernels (so engine never imports cluster, at any level),
  only cluster imports ray, engine.llm imports no task (each task supplies its simulated
  policy), no cycles between sibling modules and none ignored;
* an AST check adds what import-linter cannot express: kernels import only numpy,
  numba and the standard library; engine imports neither ray nor vllm at module
  level (the vLLM backend imports vllm lazily, inside the function that needs it).
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# llvmlite is Numba's own code generator, installed with it (kernels/prefetch.py emits an LLVM intrinsic)
KERNEL_ALLOWED = {"numpy", "numba", "llvmlite", "kernels", "__future__"} | set(sys.stdlib_module_names)


def imports(source: str, module_level_only: bool) -> list[tuple[int, str]]:
    """``(line, top-level package)`` of every absolute import; with ``module_level_only`` the
    imports that run when the module is imported (function bodies excluded, class bodies and
    module-level if/try blocks included)."""
    found: list[tuple[int, str]] = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if module_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name.split(".")[0]) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.lineno, child.module.split(".")[0]))
            visit(child)

    visit(ast.parse(source))
    return found


def violations(package: str, allowed=None, forbidden=(), module_level_only=False) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, top in imports(path.read_text(encoding="utf-8"), module_level_only):
            if (allowed is not None and top not in allowed) or top in forbidden:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {top}")
    return out


def test_the_checker_sees_module_level_and_nested_imports():
    src = ("import os\nfrom numpy import zeros\nimport ray.util\ntry:\n    import vllm\nexcept ImportError:\n"
           "    pass\nclass A:\n    import pyarrow\ndef f():\n    import torch\n    from . import x\n")
    assert [t for _, t in imports(src, module_level_only=True)] == ["os", "numpy", "ray", "vllm", "pyarrow"]
    assert [t for _, t in imports(src, module_level_only=False)][-1] == "torch"


def test_kernels_import_only_numpy_numba_and_the_standard_library():
    assert violations("kernels", allowed=KERNEL_ALLOWED) == []


def test_engine_imports_no_cluster_ray_or_vllm_at_module_level():
    assert violations("engine", forbidden={"cluster", "ray", "vllm"}, module_level_only=True) == []
    assert violations("engine", forbidden={"cluster", "ray"}) == []  # not lazily either


def test_the_test_harness_is_not_shipped():
    shipped = {p.relative_to(ROOT).as_posix() for pkg in ("engine", "kernels", "cluster") for p in (ROOT / pkg).rglob("*.py")}
    assert not [p for p in shipped if "toy" in Path(p).stem], "test harnesses belong under tests/"


importlinter = pytest.importorskip("importlinter", reason="import-linter is in the dev extra")


def _lint(capsys, extra_imports=()) -> tuple[bool, str]:
    """Run the pyproject.toml contracts; ``extra_imports`` are added to the import graph first."""
    from importlinter import configuration
    from importlinter.application import use_cases
    from importlinter.application.app_config import settings

    configuration.configure()  # what the lint-imports command does first
    real = settings.GRAPH_BUILDER

    class WithExtra:
        def build(self, **kwargs):
            graph = real.build(**kwargs)
            for importer, imported in extra_imports:
                graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="(test)")
            return graph

    settings.configure(GRAPH_BUILDER=WithExtra())
    try:
        ok = use_cases.lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    finally:
        settings.configure(GRAPH_BUILDER=real)
    return ok, capsys.readouterr().out


def test_import_contracts_hold(capsys):
    ok, report = _lint(capsys)
    assert ok, report
    assert "5 kept, 0 broken" in report


def test_no_cycle_is_ignored():
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert [c["name"] for c in contracts if c.get("ignore_imports")] == []


@pytest.mark.parametrize(
    "extra, broken",
    [
        # the two cycles this layering removed: the engine naming the Ray executor, and the store's
        # persistence reaching back into the store class
        (("engine.executor", "cluster.ray_executor"), "a lower layer never imports a higher one"),
        (("engine.store.persistence", "engine.store.experience"), "no import cycles between sibling modules"),
        (("engine.llm.openai_backend", "ray"), "cluster is the only package that imports ray"),
        # the simulated backend naming a task's policy (it was engine.llm.simulated_game24 -> engine.game24)
        (("engine.llm.factory", "engine.game24.simulated_policy"), "engine.llm imports no task"),
        (("engine.llm.factory", "engine.game24.simulated_policy"), "no import cycles between sibling modules"),
    ],
)
def test_contracts_catch_the_old_cycles(capsys, extra, broken):
    ok, report = _lint(capsys, [extra])
    assert not ok
    assert f"{broken}" in report.split("Broken contracts")[1].replace("\n", " ")
