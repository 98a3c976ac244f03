"""Prompt templates: every prompt of every method lives in a TOML file shipped with the package.

Layout: ``engine/prompts/<set>.toml``, one file per task (``game24``, ``finance``,
``forecast``) plus ``baselines`` (the Mem0 / MemRL / ReMe / FLEX extraction and
reflection prompts, shared by every task). Each file maps a prompt name to its
Jinja2 template text::

    propose = '''Combine two of the numbers ...
    Input: {{ numbers }}
    Possible next steps:
    '''

Templates are rendered the way vLLM renders chat templates: Jinja2 with
``StrictUndefined`` (a placeholder without a value is an error, never an empty
string), ``keep_trailing_newline=True`` and no autoescaping.

Each set declares, in code, the placeholders every prompt takes
(:func:`register`, e.g. ``{"value": {"numbers"}}``). A file is checked once, at
load time, with :func:`jinja2.meta.find_undeclared_variables`: an unknown prompt
name, a missing required placeholder or an unknown placeholder is refused with
a :class:`TemplateError` naming the file, the prompt and the placeholder.

A user's file (``[prompts] file = "my.toml"`` in a run config) may hold only
some prompts; the others fall back to the shipped file. :attr:`PromptSet.custom`
lists the prompts whose text differs from the shipped one, so a run can warn
that the simulated policies (which read the shipped wording) may not
understand them.

The active set of each name is process-wide (:func:`active`, :func:`use`): the
prompt modules' functions (``engine.game24.prompts.propose_prompt`` ...) keep
their signatures and render through it. :func:`use` is called by a task's
runner before any episode starts.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.config import check
from engine.errors import ConfigError

__all__ = ["SHIPPED_DIR", "PromptSet", "PromptsConfig", "TemplateError", "activate_for_run", "active", "check_files", "load",
           "register", "shipped_path", "simulated_warning", "summary_entry", "use"]

SHIPPED_DIR = Path(__file__).resolve().parent / "prompts"

_SPECS: dict[str, dict[str, frozenset[str]]] = {}
_ACTIVE: dict[str, "PromptSet"] = {}


class TemplateError(ConfigError):
    """A prompt template file that is missing, malformed, or whose placeholders do not match a prompt's spec."""


@dataclass(frozen=True)
class PromptsConfig:
    """``[prompts]``: the user's own template files (``""`` = the shipped ones).

    ``file`` replaces the task's prompts (``engine/prompts/<task>.toml``);
    ``baselines`` the baselines' extraction and reflection prompts
    (``engine/prompts/baselines.toml``). Relative paths are read from the
    current directory. A file may hold only some prompts; the rest fall back
    to the shipped text.
    """

    file: str = ""
    baselines: str = ""

    def __post_init__(self):
        for name in ("file", "baselines"):
            v = getattr(self, name)
            check(isinstance(v, str), f"prompts.{name} must be a path string, got {v!r}")
            if v:
                check(Path(v).is_file(), f"prompts.{name}: no template file at {v!r}")


def check_executor(cfg: PromptsConfig, options) -> None:
    """Custom templates are activated in the driver's process only, so they need the local executor (Ray
    workers would answer with the shipped prompts)."""
    executor = getattr(options, "executor", "local")
    if (cfg.file or cfg.baselines) and executor != "local":
        raise ConfigError("prompts.file / prompts.baselines: custom templates are activated in this process "
                          f"and need the local executor, got executor {executor!r}")


def check_files(cfg: PromptsConfig, task_set: str) -> None:
    """Check a ``[prompts]`` table's files against set ``task_set`` and the baselines set, activating nothing
    (config parsing, so ``toe run --dry-run`` refuses a bad template too)."""
    import importlib

    for module in (f"engine.{task_set}.prompts", "engine.baselines.prompts"):  # registers the sets
        importlib.import_module(module)
    if cfg.file:
        load(task_set, cfg.file)
    if cfg.baselines:
        load("baselines", cfg.baselines)


def register(name: str, spec: Mapping[str, set[str] | frozenset[str]]) -> None:
    """Declare set ``name``'s prompts and the placeholders each one takes (all required, no others allowed)."""
    _SPECS[name] = {k: frozenset(v) for k, v in spec.items()}


def shipped_path(name: str) -> Path:
    return SHIPPED_DIR / f"{name}.toml"


def _environment():
    import jinja2

    return jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise TemplateError(f"{what}: no template file at {str(path)!r}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TemplateError(f"{what}: template file {str(path)!r} is not valid TOML: {exc}") from None
    return data


def _check(name: str, path: Path, data: Mapping[str, Any], complete: bool) -> dict[str, str]:
    import jinja2
    from jinja2 import meta  # not ``jinja2.meta``: another thread's first import may not have set the attribute yet

    spec = _SPECS[name]
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise TemplateError(f"template file {str(path)!r}: unknown prompt(s) {unknown} for the {name} prompts; "
                            f"valid names: {sorted(spec)}")
    if complete:
        missing = sorted(set(spec) - set(data))
        if missing:
            raise TemplateError(f"template file {str(path)!r}: missing prompt(s) {missing} of the {name} prompts")
    env = _environment()
    out = {}
    for prompt, text in data.items():
        if not isinstance(text, str):
            raise TemplateError(f"template file {str(path)!r}: prompt {prompt!r} must be a string, "
                                f"got {type(text).__name__}")
        try:
            found = meta.find_undeclared_variables(env.parse(text))
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"template file {str(path)!r}: prompt {prompt!r} is not a valid Jinja2 template "
                                f"(line {exc.lineno}: {exc.message})") from None
        need = spec[prompt]
        if need - found:
            raise TemplateError(f"template file {str(path)!r}: prompt {prompt!r} lacks required placeholder(s) "
                                f"{sorted(need - found)} (it takes {sorted(need)})")
        if found - need:
            raise TemplateError(f"template file {str(path)!r}: prompt {prompt!r} uses unknown placeholder(s) "
                                f"{sorted(found - need)} (it takes {sorted(need)})")
        out[prompt] = text
    return out


@dataclass(frozen=True)
class PromptSet:
    """The checked templates of one set: the shipped text, overridden prompt by prompt by ``path``."""

    name: str
    sources: Mapping[str, str]
    path: str = ""  # the user's file, "" = shipped only
    custom: tuple[str, ...] = ()  # prompts whose text differs from the shipped file
    _compiled: dict = field(default_factory=dict, compare=False, repr=False)

    def _template(self, prompt: str):
        """``(compiled template, its globals as a plain dict)``, compiled on first use."""
        got = self._compiled.get(prompt)
        if got is None:
            if prompt not in self.sources:
                raise KeyError(f"no prompt {prompt!r} in the {self.name} prompts")
            tmpl = _environment().from_string(self.sources[prompt])
            got = self._compiled[prompt] = (tmpl, dict(tmpl.globals))
        return got

    def render(self, prompt: str, **values: Any) -> str:
        tmpl, base = self._template(prompt)
        # Template.render(**values), without walking the globals' ChainMap on every call: the context gets
        # the same variables (the template's globals, then the values) and the same global names
        env = tmpl.environment
        ctx = env.context_class(env, {**base, **values}, tmpl.name, tmpl.blocks, globals=base)
        try:
            return "".join(tmpl.root_render_func(ctx))
        except Exception:
            tmpl.environment.handle_exception()

    def render_pair(self, prompt: str, blank: tuple[str, ...], **values: Any) -> tuple[str, str]:
        """``(render(prompt, **values), render(prompt, **values with every name in blank set to ""))``.

        A prompt whose blanked names are used only in top-level ``{% if name %}...{% endif %}`` sections
        (no ``else``, no assignment inside; :func:`_sections`) is rendered once, with each such section
        marked, and the blanked text is the render with the marked sections cut: the same text as a
        second render. Any other template, or values that could hold a marker, is rendered twice.
        """
        _, base = self._template(prompt)
        key = ("pair", prompt, blank)
        marked = self._compiled.get(key)
        if marked is None:
            marked = self._compiled[key] = _sections(self.sources[prompt], blank) or False
        if marked is False or not all(isinstance(v, str) and _MARK not in v for v in values.values()):
            return self.render(prompt, **values), self.render(prompt, **{**values, **dict.fromkeys(blank, "")})
        tmpl = marked
        env = tmpl.environment
        ctx = env.context_class(env, {**base, **values}, tmpl.name, tmpl.blocks, globals=base)
        try:
            chunks = list(tmpl.root_render_func(ctx))
        except Exception:
            tmpl.environment.handle_exception()
        full, bare, inside = [], [], False
        for c in chunks:  # each marker is a chunk of its own (checked by _sections); values hold none
            if c == _BEGIN:
                inside = True
            elif c == _END:
                inside = False
            else:
                full.append(c)
                if not inside:
                    bare.append(c)
        return "".join(full), "".join(bare)

    def __getstate__(self):  # compiled Jinja templates do not pickle; workers recompile
        return {"name": self.name, "sources": dict(self.sources), "path": self.path, "custom": self.custom}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_compiled", {})


_BEGIN, _END = "\x1e\x1ftoe-section\x1f", "\x1f\x1etoe-section-end\x1e"  # a section's bounds in a marked render
_MARK = "\x1e"  # in both markers: a value without it cannot hold one
_SIDE_EFFECTS = ("Assign", "AssignBlock", "Macro", "CallBlock", "Block", "Include", "Import", "FromImport", "Extends",
                 "ExprStmt", "Scope", "OverlayScope", "With")


def _sections(source: str, blank: tuple[str, ...]):
    """The template with each top-level ``{% if name %}`` section of a blanked name marked (:data:`_BEGIN`,
    :data:`_END`), or None when blanking those names could change text outside such sections."""
    from jinja2 import nodes

    env = _environment()
    tree = env.parse(source)
    found = False
    for node in tree.body:
        own = (isinstance(node, nodes.If) and isinstance(node.test, nodes.Name) and node.test.name in blank
               and not node.elif_ and not node.else_)
        if own:
            if any(node.find_all(tuple(getattr(nodes, n) for n in _SIDE_EFFECTS))):
                return None  # a section that sets a variable (or includes) could change what follows it
            node.body = [nodes.Output([nodes.TemplateData(_BEGIN)], lineno=node.lineno), *node.body,
                         nodes.Output([nodes.TemplateData(_END)], lineno=node.lineno)]
            found = True
        elif any(n.name in blank for n in node.find_all(nodes.Name)):
            return None  # a blanked name read outside its own section
    if not found:
        return None
    tree.set_environment(env)
    code = env.compile(tree, raw=True)
    for mark in map(repr, (_BEGIN, _END)):  # each marker must be a chunk of its own: render_pair reads chunks
        if code.count(mark) != code.count(f"yield {mark}\n"):
            return None
    return env.from_string(tree)


def load(name: str, path: str | Path = "") -> PromptSet:
    """Load set ``name``: the shipped file, then (if given) the user's file over it, both checked."""
    if name not in _SPECS:
        raise TemplateError(f"unknown prompt set {name!r}; registered: {sorted(_SPECS)}")
    shipped = _check(name, shipped_path(name), _read(shipped_path(name), name), complete=True)
    if not path:
        return PromptSet(name, shipped)
    user = _check(name, Path(path), _read(Path(path), f"prompts for {name}"), complete=False)
    custom = tuple(sorted(k for k, v in user.items() if v != shipped[k]))
    return PromptSet(name, {**shipped, **user}, str(path), custom)


def active(name: str) -> PromptSet:
    """The set the prompt functions render with (the shipped one until :func:`use` sets another)."""
    got = _ACTIVE.get(name)
    if got is None:
        got = _ACTIVE[name] = load(name)
    return got


def use(name: str, path: str | Path = "") -> PromptSet:
    """Load and check set ``name`` (``path`` = the user's file, ``""`` = shipped) and make it active."""
    got = load(name, path)
    _ACTIVE[name] = got
    return got


def simulated_warning(sets: list[PromptSet]) -> str | None:
    """A warning for runs on the simulated backend with changed prompts, or None when all are shipped."""
    changed = [f"{s.name}: {', '.join(s.custom)} ({s.path})" for s in sets if s.custom]
    if not changed:
        return None
    return ("custom prompt templates with the simulated backend: the simulated policies parse the shipped "
            "prompts' wording, so figures for changed prompts may not mean what they did; changed: "
            + "; ".join(changed))


def activate_for_run(pairs: list[tuple[str, str]], llm_cfg) -> tuple[list[PromptSet], str | None]:
    """Load, check and activate each ``(set name, user file)``; print and return a warning for custom
    templates answered by the simulated policies (``llm.backend = "simulated"``, or a replay trace that
    records them), which read the shipped wording."""
    import sys

    sets = [use(name, path) for name, path in pairs]
    simulated = llm_cfg.answering == "simulated"
    warning = simulated_warning(sets) if simulated else None
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return sets, warning


def summary_entry(sets: list[PromptSet]) -> dict[str, dict[str, Any]]:
    """What ``summary.json`` records about a run's templates: per set, the user's file and the changed prompts."""
    return {s.name: {"file": s.path, "custom": list(s.custom)} for s in sets}
