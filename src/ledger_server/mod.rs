//! The embedded ledger (see SPEC.md §The embedded ledger).
