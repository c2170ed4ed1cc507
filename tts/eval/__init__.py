"""Evaluation: the runner, budget-allocated runs, the results store and reports (above budgets/)."""
