//! First-class cell modules: the integration policy, ref validation, task pull, finding close.

pub mod policy;
