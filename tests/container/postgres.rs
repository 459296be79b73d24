//! Two ledger replicas on one PostgreSQL database in containers, handing tasks to four cells.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use testcontainers::core::{BuildImageOptions, WaitFor};
use testcontainers::runners::SyncBuilder;
use testcontainers::{GenericBuildableImage, ImageExt};

use super::{
    BASE, Fleet, LEDGER, ORIGIN, Running, World, closed_in, exec_ok, exit_code, git_server, image,
    images, logs, repo, wait_for,
};

const POSTGRES: (&str, &str) = ("metabob-postgres", "test");
/// The one database every ledger replica serves; `postgres` is the server's name on the network.
const PG_STORE: &str = "postgres://postgres@postgres:5432/ledger";

/// The base, cell and ledger images, and the PostgreSQL image from images/postgres on the
/// same base; once per run. Its own context: it needs neither the binary nor the entrypoint.
fn postgres_image() {
    static BUILT: OnceLock<()> = OnceLock::new();
    images();
    BUILT.get_or_init(|| {
        let (name, tag) = POSTGRES;
        let dir = repo().join("images/postgres");
        let _built = GenericBuildableImage::new(name, tag)
            .with_dockerfile(dir.join("Dockerfile"))
            .with_file(dir.join("postgres-entrypoint"), "postgres-entrypoint")
            .build_image_with(BuildImageOptions::new().with_build_arg("BASE_IMAGE", BASE))
            .unwrap_or_else(|e| {
                panic!("building {name}:{tag} from images/postgres/Dockerfile: {e}")
            });
    });
}

/// A ledger replica on the shared database, reached as `alias`, healthy (the ledger image's
/// HEALTHCHECK: its entrypoint is replaced, its health check is not).
fn pg_ledger(fleet: &mut Fleet, alias: &str) -> Running {
    let public_url = format!("http://{alias}:18100");
    let req = fleet
        .on(image(LEDGER).with_entrypoint("metabob-mcp"))
        .with_cmd([
            "ledger",
            "serve",
            "--store",
            PG_STORE,
            "--listen",
            "0.0.0.0:18100",
            "--public-url",
            public_url.as_str(),
        ])
        .with_env_var("HEALTH_URL", "http://127.0.0.1:18100")
        .with_ready_conditions(vec![WaitFor::healthcheck()]);
    fleet.serve(alias, req)
}

/// PostgreSQL, ledger replicas `ledger-a` and `ledger-b` on its one database, and a git
/// server whose main holds `files`, with one task recorded per file. The key is made on
/// replica a and the tasks are recorded through replica b: the World's one-off commands
/// (`mb`, `pull`) reach b as `ledger`, so each step crosses replicas.
struct PgWorld {
    w: World,
    ledger_a: Running,
    _postgres: Running,
}

fn pg_world(files: &[&str]) -> PgWorld {
    postgres_image();
    let mut fleet = Fleet::new();
    let postgres = fleet.serve(
        "postgres",
        fleet
            .on(image(POSTGRES))
            .with_ready_conditions(vec![WaitFor::healthcheck()]),
    );
    let git = git_server(&mut fleet, files);
    // One after the other, so that a's start is the first; replicas starting together on an
    // empty database are tests/ledger/durability.rs's concern.
    let ledger_a = pg_ledger(&mut fleet, "ledger-a");
    let ledger_b = pg_ledger(&mut fleet, "ledger-b");
    let ip_b = ledger_b
        .get_bridge_ip_address()
        .expect("ledger-b's address");
    fleet.hosts.push(("ledger".to_string(), ip_b));

    let out = exec_ok(
        &ledger_a,
        &[
            "metabob-mcp",
            "ledger",
            "key",
            "create",
            "--store",
            PG_STORE,
            "--org",
            "default",
            "--scopes",
            "read,write",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("key create --json");
    let key = v["key"].as_str().expect("a key").to_string();

    let mut w = World {
        fleet,
        git,
        ledger: ledger_b,
        key,
        ids: Vec::new(),
    };
    for f in files {
        w.record(f, &format!("fix {f}"), "ref: main");
    }
    PgWorld {
        w,
        ledger_a,
        _postgres: postgres,
    }
}

impl PgWorld {
    /// Waits for the cell to exit and asserts 0, showing its log and both replicas' logs when
    /// not: a replica answers a failed query with a 500 and names the cause only in its log.
    fn exits_0(&self, cell: &Running) {
        wait_for(
            &format!("{} exiting", cell.id()),
            Duration::from_secs(600),
            || !cell.is_running().unwrap(),
        );
        let got = exit_code(cell);
        assert_eq!(
            got,
            0,
            "{} exited {got}:\n{}\n--- ledger-a:\n{}\n--- ledger-b:\n{}",
            cell.id(),
            logs(cell),
            logs(&self.ledger_a),
            logs(&self.w.ledger)
        );
    }
}

#[test]
fn two_ledger_replicas_on_postgresql_hand_eight_tasks_to_four_cells_once_each() {
    let t0 = Instant::now();
    postgres_image();
    let built = t0.elapsed();
    let files: Vec<String> = (1..=8).map(|n| format!("p{n}.py")).collect();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let mut pg = pg_world(&names);

    // Cells alternate replicas: odd ones ask ledger-a, even ones ledger-b.
    let fleet_start = Instant::now();
    let cells: Vec<(&str, Running)> = (1..=4)
        .map(|n| {
            let replica = if n % 2 == 1 { "ledger-a" } else { "ledger-b" };
            let endpoint = format!("http://{replica}:18100");
            let cell = pg.w.cell(
                &format!("cell{n}"),
                "sh /harness.sh",
                &[("DISCOVERY_ENDPOINT", endpoint.as_str())],
            );
            (replica, cell)
        })
        .collect();
    for (_, c) in &cells {
        pg.exits_0(c);
    }
    let fleet_wall = fleet_start.elapsed();
    let w = &pg.w;

    let all_logs: String = cells.iter().map(|(_, c)| logs(c)).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all_logs, id), 1, "{id}:\n{all_logs}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} on main:\n{}", w.main_log());
    }
    assert_eq!(w.pull().code, 3, "nothing is left open, through ledger-b");
    for f in &files {
        let text = exec_ok(
            &w.git,
            &["git", "-C", "/srv/app.git", "show", &format!("main:{f}")],
        );
        assert_eq!(text.matches("# fixed for ").count(), 1, "{f}:\n{text}");
    }
    // Replica a, asked directly, agrees: the state is the database's, not a replica's.
    assert!(pg.ledger_a.is_running().unwrap(), "ledger-a still serving");
    let via_a = w.attached(
        "sh",
        &[
            "-c",
            &format!(
                "DISCOVERY_ENDPOINT=http://ledger-a:18100 exec metabob-mcp task pull \
                 --origin {ORIGIN} --task-dir /tmp/t --work-dir /tmp/w --json"
            ),
        ],
    );
    assert_eq!(
        via_a.code, 3,
        "nothing is left open, through ledger-a: {via_a:?}"
    );

    let per_replica = |r: &str| -> usize {
        cells
            .iter()
            .filter(|(replica, _)| *replica == r)
            .map(|(_, c)| logs(c).matches(", outcome closed").count())
            .sum()
    };
    eprintln!(
        "container fleet on postgresql: images {built:?}, 4 cells x 8 tasks wall {fleet_wall:?} \
         (closed via ledger-a {}, via ledger-b {}), test {:?}",
        per_replica("ledger-a"),
        per_replica("ledger-b"),
        t0.elapsed()
    );
}
