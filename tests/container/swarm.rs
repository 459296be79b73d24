//! scripts/fleet.sh with FLEET_ENGINE=swarm: examples/swarm/stack.yaml deployed on this engine's
//! Swarm (a one-node swarm made for the test when the engine is in none), the cells scaled up
//! while the fleet stands, its data kept by `down`, and everything the stack made gone after
//! `down --purge`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{BASE, Forge, images, repo, wait_for};
use crate::support::{Output, bin};

fn docker(args: &[&str]) -> Output {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker");
    Output::from(out)
}

/// The engine in an active swarm for the test's length: made here, and left again however the
/// test ends, only when the engine was in none; a swarm someone else made is left alone.
struct Swarm {
    made: bool,
    /// Whether `swarm init` made the engine's docker_gwbridge network, which leaving keeps.
    made_bridge: bool,
}

impl Swarm {
    fn state() -> String {
        let out = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]);
        assert_eq!(out.code, 0, "docker info: {out:?}");
        out.stdout.trim().to_string()
    }

    fn init() -> Swarm {
        let made_bridge = docker(&["network", "inspect", "docker_gwbridge"]).code != 0;
        let out = docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"]);
        assert_eq!(out.code, 0, "docker swarm init: {out:?}");
        Swarm {
            made: true,
            made_bridge,
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        if self.made {
            let out = docker(&["swarm", "leave", "--force"]);
            if out.code != 0 {
                eprintln!("docker swarm leave --force: {out:?}");
            }
        }
        if self.made_bridge {
            let out = docker(&["network", "rm", "docker_gwbridge"]);
            if out.code != 0 {
                eprintln!("docker network rm docker_gwbridge: {out:?}");
            }
        }
    }
}

/// Where one fleet keeps its state and the HOME its git runs under.
struct Site {
    /// Removed on drop; `down` removes the state inside it first.
    root: tempfile::TempDir,
    project: String,
}

impl Site {
    fn new() -> Site {
        let root = tempfile::Builder::new()
            .prefix("mbtest-swarm-")
            .tempdir()
            .expect("temp dir");
        let home = root.path().join("home");
        std::fs::create_dir_all(&home).expect("create HOME");
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n",
        )
        .expect("write gitconfig");
        Site {
            root,
            project: format!("mbtest-swarm-{}", std::process::id()),
        }
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn state(&self) -> PathBuf {
        self.root.path().join("state")
    }

    /// `FLEET_ENGINE=swarm scripts/fleet.sh ARGS`, bounded, with this build's binary, the
    /// offline base, and a project and state of the test's own (a compose fleet of the same
    /// checkout may run at the same time). The harness works long enough that no cell is free
    /// before every cell has polled, so the tasks of one batch spread over all the cells.
    fn fleet_sh(&self, args: &[&str]) -> Output {
        self.fleet_sh_with::<&str>(args, &[])
    }

    /// [`Site::fleet_sh`] with `vars` set as well.
    fn fleet_sh_with<V: AsRef<std::ffi::OsStr>>(
        &self,
        args: &[&str],
        vars: &[(&str, V)],
    ) -> Output {
        let home = self.home();
        let out = Command::new("timeout")
            .arg("600")
            .arg(repo().join("scripts/fleet.sh"))
            .args(args)
            .env("FLEET_ENGINE", "swarm")
            .env("METABOB_BIN", bin())
            .env("BASE_IMAGE", BASE)
            .env("FLEET_PROJECT", &self.project)
            .env("FLEET_STATE", self.state())
            .env("HARNESS", "sleep 20 && sh /harness/harness.sh")
            .env("RETRY_MAX", "2")
            .env("HOME", &home)
            .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/fleet.sh");
        Output::from(out)
    }

    fn record(&self, file: &str) -> String {
        let out = self.fleet_sh(&[
            "record",
            "--summary",
            &format!("fix {file}"),
            "--file",
            file,
            "--details",
            "ref: main",
            "--json",
        ]);
        assert_eq!(out.code, 0, "record {file}: {out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
        v["finding_ids"][0].as_str().expect("an id").to_string()
    }

    /// Waits until `status` shows every one of `ids` closed; each one's closer. Past `timeout`
    /// the failure shows the last board and the cells' tasks.
    fn closed(&self, ids: &[String], timeout: Duration) -> BTreeMap<String, String> {
        let start = Instant::now();
        loop {
            let status = self.fleet_sh(&["status"]);
            let closers = closers_on(&status.stdout);
            if status.code == 0 && ids.iter().all(|id| closers.contains_key(id)) {
                return ids
                    .iter()
                    .map(|id| (id.clone(), closers[id].clone()))
                    .collect();
            }
            if start.elapsed() > timeout {
                let tasks = docker(&[
                    "service",
                    "ps",
                    "--no-trunc",
                    &format!("{}_cell", self.project),
                ]);
                panic!(
                    "{} tasks closed on `status` ({ids:?}) within {timeout:?}; the last board: \
                     {status:?}; the cells: {tasks:?}",
                    ids.len()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// Takes the fleet down however the test ends (a second `down` finds nothing and succeeds).
struct FleetDown<'a>(&'a Site);

impl Drop for FleetDown<'_> {
    fn drop(&mut self) {
        let out = self.0.fleet_sh(&["down", "--purge"]);
        if out.code != 0 {
            eprintln!("scripts/fleet.sh down --purge: {out:?}");
        }
    }
}

/// The closed tasks on the board's text and who closed each: a line
/// `closed    <id> <summary> (<verdict> commit <sha> by <cell>)`.
fn closers_on(board: &str) -> BTreeMap<String, String> {
    board
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("closed")?;
            let id = rest.split_whitespace().next()?;
            let by = l.rsplit_once(" by ")?.1.trim_end().strip_suffix(')')?;
            Some((id.to_string(), by.to_string()))
        })
        .collect()
}

/// Every object with the stack's label that `docker <kind> ls` lists: its names or ids.
fn labelled(kind: &[&str], project: &str) -> Vec<String> {
    let mut args = kind.to_vec();
    let filter = format!("label=com.docker.stack.namespace={project}");
    args.extend(["-q", "--filter", &filter]);
    let out = docker(&args);
    assert_eq!(out.code, 0, "docker {args:?}: {out:?}");
    out.stdout.lines().map(str::to_string).collect()
}

fn cells(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn fleet_sh_on_swarm_scales_cells_that_take_work_and_down_leaves_nothing() {
    let started = Instant::now();
    images();
    let site = Site::new();
    let project = site.project.clone();

    // An engine in no swarm is named in one line before anything is built; then the test
    // makes the swarm it needs.
    let swarm = match Swarm::state().as_str() {
        "active" => Swarm {
            made: false,
            made_bridge: false,
        },
        "inactive" => {
            let out = site.fleet_sh(&["up", "3"]);
            assert_eq!(out.code, 1, "{out:?}");
            assert!(
                out.stderr.contains(
                    "fleet.sh: this Docker engine is not in a swarm; run: docker swarm init"
                ),
                "{out:?}"
            );
            Swarm::init()
        }
        other => panic!("this engine's swarm is {other}; the test needs it active or inactive"),
    };
    let down = FleetDown(&site);

    let up = site.fleet_sh(&["up", "3"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr.contains("3 cells are up on git://git/app.git"),
        "{up:?}"
    );
    // No host port: the stack cannot collide with a compose fleet's 127.0.0.1:18100.
    let ports = docker(&["service", "ls", "--format", "{{.Name}} {{.Ports}}"]);
    for line in ports.stdout.lines().filter(|l| l.starts_with(&project)) {
        assert_eq!(line.split_whitespace().count(), 1, "published: {line}");
    }

    let first: Vec<String> = ["a.py", "b.py", "c.py"]
        .iter()
        .map(|f| site.record(f))
        .collect();
    let closed = site.closed(&first, Duration::from_secs(300));
    let by: BTreeSet<String> = closed.values().cloned().collect();
    assert!(
        by.is_subset(&cells(&["cell-1", "cell-2", "cell-3"])),
        "the three slots' cells closed the first tasks: {closed:?}"
    );

    let cell_service = format!("{project}_cell");
    let scale = docker(&["service", "scale", "--detach", &format!("{cell_service}=5")]);
    assert_eq!(scale.code, 0, "{scale:?}");
    wait_for(
        &format!("{cell_service} running 5 of 5 replicas"),
        Duration::from_secs(120),
        || {
            let out = docker(&[
                "service",
                "ls",
                "--filter",
                &format!("name={cell_service}"),
                "--format",
                "{{.Name}} {{.Replicas}}",
            ]);
            out.stdout
                .lines()
                .any(|l| l == format!("{cell_service} 5/5"))
        },
    );

    let second: Vec<String> = ["d.py", "e.py", "f.py", "g.py", "h.py"]
        .iter()
        .map(|f| site.record(f))
        .collect();
    let closed = site.closed(&second, Duration::from_secs(300));
    // A cell's identity is its slot (VESSEL_ID cell-{{.Task.Slot}}): slots 4 and 5 exist only
    // since the scale, so their names on the board are work the added replicas did.
    let by: BTreeSet<String> = closed.values().cloned().collect();
    assert!(
        by.is_superset(&cells(&["cell-4", "cell-5"])),
        "both added cells closed tasks of the second batch: {closed:?}"
    );
    assert!(
        by.is_subset(&cells(&["cell-1", "cell-2", "cell-3", "cell-4", "cell-5"])),
        "{closed:?}"
    );

    // Down keeps the ledger's volume and the state (repositories, key) for the next up.
    let out = site.fleet_sh(&["down"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("the fleet is down; kept"), "{out:?}");
    assert_ne!(labelled(&["volume", "ls"], &project), Vec::<String>::new());
    assert!(site.state().join("repos/app.git").exists());
    let out = site.fleet_sh(&["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");

    // Up again on the operator's own origin: its login and CA reach the cells as secrets, no
    // git service runs, and the fix lands on the origin itself.
    let env = crate::support::TestEnv::new();
    let forge = Forge::new(&env, &[("a.py", "x = 1\n")]);
    let up = site.fleet_sh_with(&["up", "1", &forge.url], &forge.vars());
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr
            .contains(&format!("1 cells are up on {}", forge.url)),
        "{up:?}"
    );
    let git = docker(&["service", "ls", "--format", "{{.Name}} {{.Replicas}}"]);
    assert!(
        git.stdout
            .lines()
            .any(|l| l == format!("{project}_git 0/0")),
        "{git:?}"
    );
    let id = site.record("a.py");
    site.closed(std::slice::from_ref(&id), Duration::from_secs(300));
    let log = env.git(&forge.bare, &["log", "--format=%B", "main"]);
    assert!(log.contains(&format!("Fixes-Finding: {id}")), "{log}");
    let secrets = labelled(&["secret", "ls"], &project);
    assert_eq!(
        secrets.len(),
        3,
        "the key, the login and the trust: {secrets:?}"
    );
    let out = site.fleet_sh(&["down"]);
    assert_eq!(out.code, 0, "{out:?}");

    let out = site.fleet_sh(&["down", "--purge"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("purged"), "{out:?}");
    let stacks = docker(&["stack", "ls", "--format", "{{.Name}}"]);
    assert_eq!(stacks.code, 0, "{stacks:?}");
    assert!(!stacks.stdout.lines().any(|l| l == project), "{stacks:?}");
    for kind in [
        &["service", "ls"][..],
        &["ps", "-a"],
        &["network", "ls"],
        &["volume", "ls"],
        &["secret", "ls"],
        &["config", "ls"],
    ] {
        assert_eq!(labelled(kind, &project), Vec::<String>::new(), "{kind:?}");
    }
    assert!(
        !site.state().exists(),
        "the state {} is left",
        site.state().display()
    );
    // Without a fleet, each step says so in one line.
    let out = site.fleet_sh(&["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");

    drop(down);
    drop(swarm);
    eprintln!("the swarm fleet test took {:?}", started.elapsed());
}

#[test]
fn an_unknown_fleet_engine_is_named_in_one_line() {
    let out = Command::new(repo().join("scripts/fleet.sh"))
        .arg("status")
        .env("FLEET_ENGINE", "kubernetes")
        .env("FLEET_STATE", Path::new("/nonexistent/fleet-state"))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/fleet.sh");
    let out = Output::from(out);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "fleet.sh: FLEET_ENGINE is 'kubernetes', which is no engine; set it to compose (the default) or swarm",
        "{out:?}"
    );
}
