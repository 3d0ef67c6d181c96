"""The judging engine: rubrics, the prompts a judge model is asked, strict parsing of its
answers against a JSON schema, the run over a comparison's items, and the figures made from
the verdicts (scores, position consistency, verbosity, Cohen's kappa). No Django.
"""

from .rubric import (
    PAIRWISE,
    POINTWISE,
    Criterion,
    Rubric,
    RubricError,
    answer_schema,
    check_answer,
    check_rubric,
    judge_messages,
    parse_answer,
)
from .run import (
    Call,
    JudgeCancelled,
    PairItem,
    PointItem,
    Reply,
    Verdict,
    estimate_cost,
    run_judge,
)
from .stats import cohen_kappa, pairwise_summary, pointwise_summary

__all__ = [
    "PAIRWISE", "POINTWISE", "Call", "Criterion", "JudgeCancelled", "PairItem", "PointItem", "Reply", "Rubric",
    "RubricError", "Verdict", "answer_schema", "check_answer", "check_rubric", "cohen_kappa", "estimate_cost",
    "judge_messages", "pairwise_summary", "parse_answer", "pointwise_summary", "run_judge",
]
