"""One error hierarchy for the whole engine.

Every error a user can cause subclasses :class:`EngineError` and ``ValueError``,
so callers may catch either. Messages name the argument, what was expected and
what came (hnswlib's "The input label shape %d does not match ..." is the tone).
"""


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""


class ConfigError(EngineError, ValueError):
    """A malformed config file, section, key or value."""


class InputError(EngineError, ValueError):
    """Bad input data: wrong shape, dtype, range, NaN, unknown ids, bad columns."""


class StoreError(EngineError, ValueError):
    """A store operation that cannot be done (unknown eid, inconsistent tables)."""


class PersistenceError(EngineError, ValueError):
    """A checkpoint or file that is truncated, corrupted, foreign or incompatible."""


class PuzzleError(InputError):
    """A Game-of-24 puzzle that is not four numbers within the configured bounds."""


class BackendError(EngineError, RuntimeError):
    """An LLM or embedding backend that failed after its retries."""


class MissingExtraError(EngineError, ImportError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, module: str, extra: str):
        super().__init__(
            f"{module} is not installed; install it with: pip install '.[{extra}]' "
            f"(or pip install 'toe-engine[{extra}]')"
        )
        self.module = module
        self.extra = extra


def require(module: str, extra: str):
    """Import ``module`` lazily or raise :class:`MissingExtraError` naming ``extra``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError(module, extra) from exc
