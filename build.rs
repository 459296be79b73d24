//! Links the binary as a position-dependent executable on Linux.
//!
//! As a PIE the dynamic loader applies some 52,000 relative relocations at every start, writing
//! to (and so copying) each page of relocated data: about 3 ms of the 5 ms `serve` took to answer
//! `initialize`, more than everything the server itself does before answering. Linked at a fixed
//! address those relocations are resolved once, by the linker. The cost is that the executable's
//! own image is not placed at a random address (shared libraries, heap and stack still are), as
//! with Go's default builds; the crate denies `unsafe` code.
// Cargo reads a build script's instructions from its stdout.
#![allow(clippy::print_stdout)]

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
