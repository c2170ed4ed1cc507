"""Budgets: hardware specs, model architecture, the Kinetics-style cost model, the usage ledger,
difficulty estimators and the compute allocator."""
