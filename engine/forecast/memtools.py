"""MemTools and MemGuides: static checks, sandboxed inspection, staged all-or-nothing publication (B.3, B.4).

A MemTool is a Python file exporting ``TOOL_NAME``, ``TOOL_SPEC`` (OpenAI
function-tool schema), ``build_runner_kwargs(arguments, config,
runtime_context)`` and ``run_tool(**kwargs) -> str`` (paper Prompt 6). A
MemGuide is a JSON object with non-empty ``guide_name``, ``prompt`` and
``tool_names``.

Admission (B.4), in order, for one candidate (a guide plus its new tools):
required guide fields; every referenced tool exists (published or in the
candidate); each new tool's syntax (``compile``), then its exports and schema,
read by importing it *inside the sandbox* (untrusted code never runs in the
engine process); then the caller's validation runs (every validation example,
sandboxed). The candidate is staged in a private folder and published only if
every step passes: new tool files are written in, then the manifest is replaced
atomically (:mod:`engine.atomic_io`). A failure at any step leaves the published state
(files and manifest) exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from engine import atomic_io
from engine.errors import InputError
from engine.forecast.sandbox import SandboxLimits, run_sandboxed

REQUIRED_EXPORTS = ("TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class AdmissionError(InputError):
    """A candidate guide or tool that failed a validation step; the message names the step."""


def check_guide(guide: Mapping, available: set[str] | frozenset[str]) -> dict:
    """Required fields and tool references of a MemGuide; returns a clean copy."""
    if not isinstance(guide, Mapping):
        raise AdmissionError(f"guide must be a JSON object, got {type(guide).__name__}")
    for key in ("guide_name", "prompt"):
        if not isinstance(guide.get(key), str) or not guide[key].strip():
            raise AdmissionError(f"guide field {key!r} must be a non-empty string, got {guide.get(key)!r}")
    names = guide.get("tool_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise AdmissionError(f"guide field 'tool_names' must be a non-empty list of names, got {names!r}")
    missing = [n for n in names if n not in available]
    if missing:
        raise AdmissionError(f"guide {guide['guide_name']!r} references missing tool(s) {missing}; "
                             f"available: {sorted(available)}")
    return {"guide_name": guide["guide_name"].strip(), "prompt": guide["prompt"], "tool_names": list(names)}


def check_spec(name: str, spec) -> None:
    """OpenAI function-tool schema: {"type": "function", "function": {"name": name, "parameters": {object}}}."""
    if not isinstance(spec, dict) or spec.get("type") != "function" or not isinstance(spec.get("function"), dict):
        raise AdmissionError(f"tool {name!r}: TOOL_SPEC must be {{'type': 'function', 'function': {{...}}}}, got {spec!r:.120}")
    fn = spec["function"]
    if fn.get("name") != name:
        raise AdmissionError(f"tool {name!r}: TOOL_SPEC.function.name must equal TOOL_NAME, got {fn.get('name')!r}")
    params = fn.get("parameters")
    if not isinstance(params, dict) or params.get("type") != "object":
        raise AdmissionError(f"tool {name!r}: TOOL_SPEC.function.parameters must be a JSON Schema object, got {params!r:.120}")
    props = params.get("properties", {})
    if not isinstance(props, dict):
        raise AdmissionError(f"tool {name!r}: parameters.properties must be an object, got {type(props).__name__}")
    req = params.get("required", [])
    if not isinstance(req, list) or any(r not in props for r in req):
        raise AdmissionError(f"tool {name!r}: parameters.required must list declared properties, got {req!r}")


def inspect_tool(source: str, limits: SandboxLimits | None = None) -> tuple[str, dict]:
    """Syntax, exports and schema of a MemTool source; returns (TOOL_NAME, TOOL_SPEC)."""
    try:
        compile(source, "<memtool>", "exec")
    except SyntaxError as exc:
        raise AdmissionError(f"tool source has a syntax error: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="memtool-inspect-") as tmp:
        tool = Path(tmp) / "tool.py"
        tool.write_text(source, encoding="utf-8")
        item = Path(tmp) / "item"
        item.mkdir()
        res = run_sandboxed(tool, item, {"mode": "inspect"}, limits)
    if not res.ok:
        raise AdmissionError(f"tool could not be loaded in the sandbox ({res.status}): {res.error}")
    p = res.payload or {}
    ex = p.get("exports", {})
    missing = [n for n in REQUIRED_EXPORTS if ex.get(n) is None]
    if missing:
        raise AdmissionError(f"tool is missing required export(s) {missing}")
    if ex.get("build_runner_kwargs") is not True or ex.get("run_tool") is not True:
        raise AdmissionError("tool exports build_runner_kwargs and run_tool must be callables")
    name = p.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise AdmissionError(f"TOOL_NAME must be an identifier of at most 64 characters, got {name!r}")
    check_spec(name, p.get("spec"))
    return name, p["spec"]


def content_hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class MemTool:
    name: str
    spec: dict
    source: str
    path: Path


@dataclass
class Candidate:
    """A generated (guide, new tools) unit; ``tools`` maps any label to tool source code."""

    guide: dict
    tools: list[str] = field(default_factory=list)


class ProceduralStore:
    """Published MemTools and MemGuides in a folder: tools/<name>.py, guides/<id>.json, manifest.json."""

    def __init__(self, root: str | Path, limits: SandboxLimits | None = None):
        self.root = Path(root)
        self.limits = limits or SandboxLimits()
        (self.root / "tools").mkdir(parents=True, exist_ok=True)
        (self.root / "guides").mkdir(parents=True, exist_ok=True)
        self.manifest_path = self.root / "manifest.json"
        if not self.manifest_path.exists():
            self._write_manifest({"tools": {}, "guides": {}})
        self._load()

    # --------------------------------------------------------------- state
    def _load(self) -> None:
        try:
            m = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"procedural store manifest {str(self.manifest_path)!r} is unreadable: {exc}") from exc
        self.manifest = m
        self.tools: dict[str, MemTool] = {}
        for name, meta in m["tools"].items():
            path = self.root / "tools" / f"{name}.py"
            self.tools[name] = MemTool(name, meta["spec"], path.read_text(encoding="utf-8"), path)
        self.guides: dict[str, dict] = {}
        for gid in m["guides"]:
            self.guides[gid] = json.loads((self.root / "guides" / f"{gid}.json").read_text(encoding="utf-8"))

    def _write_manifest(self, m: dict) -> None:
        atomic_io.write_text(self.manifest_path, json.dumps(m, indent=1))

    def state_fingerprint(self) -> str:
        """Hash of the manifest and every published file (tests: a rejected candidate leaves it unchanged)."""
        h = hashlib.sha256(self.manifest_path.read_bytes())
        for sub in ("tools", "guides"):
            for p in sorted((self.root / sub).glob("*")):
                h.update(p.name.encode())
                h.update(p.read_bytes())
        return h.hexdigest()

    def files(self) -> dict[str, str]:
        """Every published file (``manifest.json``, ``tools/*.py``, ``guides/*.json``) by path under the root.

        The store as plain data: a round's snapshot carries it to workers, which rebuild it with
        :meth:`from_files` in a folder of their own (the sandbox runs the tools from there).
        """
        out = {"manifest.json": self.manifest_path.read_text(encoding="utf-8")}
        for sub in ("tools", "guides"):
            for p in sorted((self.root / sub).glob("*")):
                if p.is_file():
                    out[f"{sub}/{p.name}"] = p.read_text(encoding="utf-8")
        return out

    @classmethod
    def from_files(cls, root: str | Path, files: Mapping[str, str], limits: SandboxLimits | None = None
                   ) -> "ProceduralStore":
        """A store at ``root`` holding exactly ``files`` (what :meth:`files` returned)."""
        root = Path(root)
        for rel, text in files.items():
            if rel != "manifest.json" and not re.fullmatch(r"(tools|guides)/[A-Za-z0-9_.-]+", rel):
                raise InputError(f"procedural store file {rel!r} is not manifest.json, tools/<name> or guides/<name>")
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_io.write_text(path, text)
        return cls(root, limits)

    def tool_paths(self, names) -> dict[str, Path]:
        return {n: self.tools[n].path for n in names}

    # --------------------------------------------------------------- admission
    def stage(self, cand: Candidate, staging: Path) -> tuple[dict, dict[str, MemTool]]:
        """Static checks of a candidate; writes its new tools under ``staging``."""
        new: dict[str, MemTool] = {}
        for i, src in enumerate(cand.tools):
            try:
                name, spec = inspect_tool(src, self.limits)
            except AdmissionError as exc:
                raise AdmissionError(f"candidate tool #{i}: {exc}") from exc
            if name in new:
                raise AdmissionError(f"candidate defines tool {name!r} twice")
            if name in self.tools and self.tools[name].source != src:
                raise AdmissionError(f"candidate tool {name!r} clashes with a published tool of the same name; "
                                     f"reuse it by name or choose a new name")
            path = staging / f"{name}.py"
            path.write_text(src, encoding="utf-8")
            new[name] = MemTool(name, spec, src, path)
        guide = check_guide(cand.guide, set(self.tools) | set(new))
        return guide, new

    def admit(self, cand: Candidate, validate: Callable[[dict, dict[str, Path]], None] | None = None,
              parent: str | None = None) -> str:
        """Validate and publish a candidate atomically; returns the new guide id. Raises AdmissionError.

        ``validate(guide, tool_paths)`` runs the staged guide on every
        validation example and raises AdmissionError on any failure.
        """
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=self.root))
        try:
            guide, new = self.stage(cand, staging)
            paths = {n: (new[n].path if n in new else self.tools[n].path) for n in guide["tool_names"]}
            if validate is not None:
                validate(guide, paths)
            gid = f"guide_{content_hash(guide)}"
            if gid in self.guides:
                raise AdmissionError(f"an identical guide is already published as {gid}")
            # publish: new files first, the manifest last (the commit point)
            m = json.loads(json.dumps(self.manifest))
            for name, tool in new.items():
                if name not in self.tools:
                    atomic_io.write_text(self.root / "tools" / f"{name}.py", tool.source)
                    m["tools"][name] = {"spec": tool.spec}
            atomic_io.write_text(self.root / "guides" / f"{gid}.json", json.dumps(guide, indent=1))
            m["guides"][gid] = {"parent": parent, "tools": guide["tool_names"]}
            self._write_manifest(m)
            self._load()
            return gid
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def seed(self, tool_sources: Mapping[str, str], guide: dict) -> str:
        """Publish the seed tools and guide (validated like any candidate, without example runs)."""
        if self.guides:
            return next(iter(self.guides))
        return self.admit(Candidate(dict(guide), list(tool_sources.values())))
