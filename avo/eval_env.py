"""The environment variables avo sets for every evaluation, named once.

A target's ``settings_env`` may not name any of them (``TargetSpec`` refuses it): their values
are avo's, never a setting recorded at ``avo start``.
"""

QUICK = "AVO_QUICK"  # "1" when the target's cheap mode was asked for, else "0"
SANDBOX = "AVO_SANDBOX"  # the sandbox level candidates run under (also the user's choice: auto, bwrap, none)
LOG_DIR = "AVO_LOG_DIR"  # where the evaluator may write full logs, kept beside the run's log
EVAL_SECRET = "AVO_EVAL_SECRET"  # this evaluation's secret, for the trusted evaluator alone (it pops it)
CANDIDATE_PREFIX = "AVO_CANDIDATE_PREFIX"  # isolation: candidate: the sandbox's command prefix (JSON)

SET_BY_AVO = frozenset({QUICK, SANDBOX, LOG_DIR, EVAL_SECRET, CANDIDATE_PREFIX})
