//! The attachment (see SPEC.md §Attachment).
