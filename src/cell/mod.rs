//! First-class cell modules: the integration policy, ref validation, task pull, finding close.

pub mod policy;
pub mod task_claim;
pub mod task_pull;
