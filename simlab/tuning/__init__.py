"""Tuning the adaptive policy's options with Optuna on the simulated system."""

# TPE's first trials are drawn at random (Optuna's n_startup_trials): a search no longer than this has not yet
# searched, and decide says so (simlab/decision/run.py `budget_moves`)
STARTUP_TRIALS = 10
