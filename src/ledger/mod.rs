//! The ledger's vocabulary on the client side: findings, verdicts, claims, header blocks and
//! recall. Each fact has one owner here; commands and tools only adapt.

pub mod claims;
pub mod finding;
pub mod header;
pub mod recall;
pub mod verdict;
