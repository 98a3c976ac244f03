"""FLEX (seed 002) as one of the baseline memories: the method lives in :mod:`engine.flex.memory`.

Kept so that every baseline is found under :mod:`engine.baselines`; see
:mod:`engine.flex` for the experience library, retrieval, reflection, prompt
augmentation, performance tracking and the pitfall defences.
"""

from engine.flex.memory import (  # noqa: F401
    COLUMNS,
    FlexConfig,
    FlexMemory,
    FlexReader,
    augment,
    estimate_difficulty,
    extract_techniques,
    failure_reason,
    recorded_attempt,
    rule_reflection,
)
