"""The comparison engine: generating a grid of outputs, scoring them against references, and
rating models from pairwise votes (Bradley–Terry with bootstrap intervals). No Django.

Importing this package imports neither torch nor numpy; they are imported when used.
"""

from .ratings import Leaderboard, Outcome, Standing, bootstrap_ratings, bradley_terry, leaderboard, win_counts
from .run import Answer, Cell, GridCancelled, GridModel, GridPrompt, call_column, generate_cells, run_grid
from .scores import exact_match, rouge_l, score_output, tokens

__all__ = [
    "Answer", "Cell", "GridCancelled", "GridModel", "GridPrompt", "Leaderboard", "Outcome", "Standing", "bootstrap_ratings",
    "bradley_terry", "call_column", "exact_match", "generate_cells", "leaderboard", "rouge_l", "run_grid", "score_output", "tokens",
    "win_counts",
]
