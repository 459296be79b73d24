//! The board's typed model, shared by the ledger that builds it and `task list` that shows it.
