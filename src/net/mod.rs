//! The one HTTP path (see SPEC.md §Network).
