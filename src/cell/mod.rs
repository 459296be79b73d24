//! Cell modules: the steps a container cell runs around one task (see DESIGN.md, `src/cell/`).

pub mod refname;
