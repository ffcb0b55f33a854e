"""Tuning the adaptive policy's options with Optuna on the simulated system."""
