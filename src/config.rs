//! Configuration lookup and precedence (see SPEC.md §Configuration).
