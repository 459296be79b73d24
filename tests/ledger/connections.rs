//! The connection cap: idle sockets cannot starve a ledger of file descriptors.

use std::net::TcpStream;

use crate::support::TestEnv;

/// Under an open-file limit of 256, far more idle sockets than descriptors: the ledger keeps
/// under its cap by closing the longest idle, so a keyed request still gets in and answers.
#[test]
fn idle_sockets_past_the_open_file_limit_leave_room_for_a_keyed_request() {
    let env = TestEnv::new();
    let l = env.ledger_wrapped(
        "capped",
        &["sh", "-c", "ulimit -n 256 && exec \"$@\"", "sh"],
        &[],
    );
    let idle: Vec<TcpStream> = (0..400)
        .map(|_| TcpStream::connect(("127.0.0.1", l.port())).expect("connect"))
        .collect();
    let listed = env.run(&["task", "list", "--json"]);
    assert_eq!(
        listed.code, 0,
        "a keyed request behind 400 idle sockets: {listed:?}"
    );
    let (status, _) = super::http(&l.url, "GET", "/health", None, None);
    assert_eq!(status, 200);
    drop(idle);
}
