"""Equal steps per rank for any framework: ``EqualStepsReader`` (rules "carry" and "pad").

The public face of ``cntkio._src.integrations.equal_steps``."""

from cntkio._src.integrations.equal_steps import (
    RULES,
    EpochSteps,
    EqualSteps,
    EqualStepsReader,
    RankStream,
    SharedCarry,
    check_rule,
)

__all__ = [
    "RULES",
    "EpochSteps",
    "EqualSteps",
    "EqualStepsReader",
    "RankStream",
    "SharedCarry",
    "check_rule",
]
