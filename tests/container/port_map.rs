//! A ledger reached through a real port map: its `--public-url` is its name on the containers'
//! network, which the host cannot resolve, and the client on the host uses the address it
//! reached the ledger at instead.

use testcontainers::ImageExt;
use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;

use super::{Fleet, LEDGER, cells_key, image, images};
use crate::support::{TestEnv, closed_port};

#[test]
fn a_ledger_behind_a_port_map_is_used_at_the_mapped_address() {
    images();
    let fleet = Fleet::new();
    let host_port = closed_port();
    let ledger = fleet
        .on(image(LEDGER))
        .with_env_var("PUBLIC_URL", "http://ledger:18100")
        .with_env_var("HEALTH_URL", "http://127.0.0.1:18100")
        .with_mapped_port(host_port, ContainerPort::Tcp(18100))
        .with_ready_conditions(vec![WaitFor::healthcheck()])
        .with_container_name(format!("{}-ledger", fleet.net))
        .start()
        .expect("start the ledger");
    let key = cells_key(&ledger);

    let mut env = TestEnv::new();
    let reached = format!("http://127.0.0.1:{host_port}");
    env.set("METABOB_LEDGER", reached.clone())
        .set("METABOB_API_KEY", key);
    let check = env.run(&["attach", "--check", "--json"]);
    assert_eq!(check.code, 0, "{check:?}");
    let v: serde_json::Value = serde_json::from_str(&check.stdout).expect("JSON");
    assert_eq!(v["state"]["identity"]["advertised"], "http://ledger:18100");
    assert_eq!(v["state"]["identity"]["endpoint"], reached.as_str(), "{v}");
    assert_eq!(v["state"]["identity"]["source"], "reached", "{v}");
    let listed = env.run(&["task", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
}
