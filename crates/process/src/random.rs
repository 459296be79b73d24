//! Randomness, drawn from the OS in one place: ids, session ids, temp names and ports. The
//! formats they are written in are vocabulary (`metabob_wire::{text, finding}`).

use metabob_wire::text::hex;

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf)
        .expect("the OS random source is available on every supported platform");
    hex(&buf)
}

/// A version-4 UUID, for session ids.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    u16::from_le_bytes(b)
}

/// A new finding id (`agf_` and 16 hex digits, [`metabob_wire::finding::finding_id`]) from 8
/// random bytes.
pub fn new_finding_id() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    metabob_wire::finding::finding_id(b)
}
