//! The container cell in real containers: the base image built offline (images/base/build.sh),
//! the shipped Dockerfiles built on it, and a ledger, a git daemon and cells on a user-defined
//! Docker network. Docker is driven through the testcontainers crate (the issue names it); the
//! one operation it lacks, kill, goes to the Docker engine API through the bollard client it
//! re-exports. No Docker is a failure, never a skip.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use testcontainers::core::wait::ExitWaitStrategy;
use testcontainers::core::{
    AccessMode, BuildImageOptions, CmdWaitFor, ExecCommand, Host, Mount, WaitFor,
};
use testcontainers::runners::{SyncBuilder, SyncRunner};
use testcontainers::{Container, ContainerRequest, GenericBuildableImage, GenericImage, ImageExt};

use crate::support::{Output, bin};

const BASE: &str = "metabob-base:bookworm";
const CELL: (&str, &str) = ("metabob-cell", "test");
const LEDGER: (&str, &str) = ("metabob-ledger", "test");

/// A started container; removed on drop.
type Running = Container<GenericImage>;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn image((name, tag): (&str, &str)) -> GenericImage {
    GenericImage::new(name, tag)
}

/// Builds the base image (once per machine: build.sh keeps an existing one) and the cell and
/// ledger images from the shipped Dockerfiles, with this build's binary and the entrypoint as
/// their context; once per run. The base is local, so FROM never pulls, and `start` only pulls
/// an image the engine lacks, which none of these is once built.
fn images() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // The base is a debootstrap + `docker import` (DESIGN.md §Containers): a shipped script,
        // not a Dockerfile, so it is built by the script, which keeps an existing image.
        let base = Command::new("sh")
            .arg(repo().join("images/base/build.sh"))
            .env("IMAGE", BASE)
            .stdin(Stdio::null())
            .output()
            .expect("run images/base/build.sh");
        let base = Output::from(base);
        assert_eq!(base.code, 0, "images/base/build.sh: {base:?}");
        assert_eq!(base.stdout.trim(), BASE);

        for ((name, tag), file) in [
            (CELL, "images/cell/Dockerfile"),
            (LEDGER, "images/ledger/Dockerfile"),
        ] {
            // The built image's handle is not needed: containers name it by name and tag.
            // Built twice at most: the engine's build stream has been seen to end early once
            // ("bytes remaining on stream"), which a second build does not repeat.
            let build = || {
                GenericBuildableImage::new(name, tag)
                    .with_dockerfile(repo().join(file))
                    .with_file(bin(), "metabob-mcp")
                    .with_file(repo().join("entrypoint/cell-entrypoint"), "cell-entrypoint")
                    .build_image_with(BuildImageOptions::new().with_build_arg("BASE_IMAGE", BASE))
            };
            let _built = build().or_else(|first| {
                eprintln!("building {name}:{tag} failed ({first}); building it once more");
                build()
            });
            let _built = _built.unwrap_or_else(|e| {
                panic!("building {name}:{tag} from {file} needs a running Docker engine: {e}")
            });
        }
    });
}

/// Kills a container with SIGKILL. testcontainers has stop (SIGTERM, then SIGKILL after the
/// timeout) but no kill, so this goes to the engine API through its re-exported bollard.
fn kill(c: &Running) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for bollard");
    rt.block_on(async {
        let docker =
            testcontainers::bollard::Docker::connect_with_defaults().expect("the Docker engine");
        docker
            .kill_container(c.id(), None)
            .await
            .expect("kill the container");
    });
}

/// A user-defined network and the names the fleet's containers find each other by.
/// testcontainers creates the network with the first container on it and removes it with the
/// last; each container is removed on drop.
struct Fleet {
    net: String,
    /// The crate sets no network aliases, so the servers' names reach the other containers as
    /// /etc/hosts entries (`with_host`) holding their address on the network.
    hosts: Vec<(String, IpAddr)>,
}

impl Fleet {
    fn new() -> Fleet {
        static N: AtomicUsize = AtomicUsize::new(0);
        let net = format!(
            "mbcell-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        Fleet {
            net,
            hosts: Vec::new(),
        }
    }

    /// `image` on the network, knowing the servers started so far by name.
    fn on(&self, image: GenericImage) -> ContainerRequest<GenericImage> {
        let mut req = image.with_network(&self.net);
        for (name, ip) in &self.hosts {
            req = req.with_host(name, Host::Addr(*ip));
        }
        req
    }

    /// Starts `req` named `<net>-<alias>`; the container is removed on drop.
    fn start(&self, alias: &str, req: ContainerRequest<GenericImage>) -> Running {
        req.with_container_name(format!("{}-{alias}", self.net))
            .start()
            .unwrap_or_else(|e| panic!("start {alias} on {}: {e}", self.net))
    }

    /// A server the later containers reach as `alias`.
    fn serve(&mut self, alias: &str, req: ContainerRequest<GenericImage>) -> Running {
        let c = self.start(alias, req);
        let ip = c.get_bridge_ip_address().expect("the server's address");
        self.hosts.push((alias.to_string(), ip));
        c
    }

    /// A one-off run on the network to its exit (`docker run --rm`): its code and output.
    fn run(&self, req: ContainerRequest<GenericImage>) -> Output {
        one_off(req)
    }
}

/// Runs `req` to its exit and removes it: the exit code and both streams.
fn one_off(req: ContainerRequest<GenericImage>) -> Output {
    let c = req
        .with_ready_conditions(vec![WaitFor::exit(ExitWaitStrategy::new())])
        .with_startup_timeout(Duration::from_secs(120))
        .start()
        .unwrap_or_else(|e| panic!("a one-off container: {e}"));
    Output {
        code: exit_code(&c),
        stdout: String::from_utf8_lossy(&c.stdout_to_vec().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&c.stderr_to_vec().unwrap()).into_owned(),
    }
}

fn exit_code(c: &Running) -> i32 {
    let code = c.exit_code().unwrap().expect("an exited container");
    i32::try_from(code).unwrap_or(-1)
}

/// `cmd` run in `c` to its end (`docker exec`): its code and output.
fn exec(c: &Running, cmd: &[&str]) -> Output {
    let mut r = c
        .exec(ExecCommand::new(cmd.iter().copied()).with_cmd_ready_condition(CmdWaitFor::exit()))
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&r.stdout_to_vec().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&r.stderr_to_vec().unwrap()).into_owned();
    let code = r
        .exit_code()
        .unwrap()
        .map_or(-1, |c| i32::try_from(c).unwrap_or(-1));
    Output {
        code,
        stdout,
        stderr,
    }
}

fn exec_ok(c: &Running, cmd: &[&str]) -> String {
    let out = exec(c, cmd);
    assert_eq!(out.code, 0, "exec {cmd:?}: {out:?}");
    out.stdout.trim().to_string()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{what} within {timeout:?}");
}

#[test]
fn the_cell_image_with_no_ledger_configured_exits_2_naming_the_cause() {
    images();
    let out = one_off(
        image(CELL)
            .with_network("none")
            .with_env_var("ORIGIN", "git://git/app.git")
            .with_env_var("HARNESS", "true"),
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("not_configured"), "{out:?}");
}

/// The git server: a bare `app.git` whose main holds `files`, served by `git daemon` with
/// pushes enabled, in a container built from the same base image. A restarted container serves
/// the repository it has.
fn git_server(fleet: &mut Fleet, files: &[&str]) -> Running {
    let mut script = String::from(
        "set -eu; if [ ! -d /srv/app.git ]; then mkdir -p /seed /srv; cd /seed; git init -q -b main; \
         git config user.name seed; git config user.email seed@example.invalid; ",
    );
    for f in files {
        script.push_str(&format!("echo 'x = 1' > {f}; "));
    }
    script.push_str(
        "git add -A; git commit -q -m initial; git clone -q --bare /seed /srv/app.git; fi; \
         exec git daemon --reuseaddr --export-all --enable=receive-pack --base-path=/srv /srv",
    );
    let (name, tag) = BASE.split_once(':').expect("name:tag");
    let req = fleet.on(GenericImage::new(name, tag).with_entrypoint("sh"));
    let git = fleet.serve("git", req.with_cmd(["-c", script.as_str()]));
    wait_for(
        "git daemon serving app.git",
        Duration::from_secs(30),
        || exec(&git, &["git", "ls-remote", "git://127.0.0.1/app.git"]).code == 0,
    );
    git
}

/// The ledger container, healthy (the image's HEALTHCHECK), and a read-write key for the cells.
fn ledger(fleet: &mut Fleet) -> (Running, String) {
    let req = fleet
        .on(image(LEDGER))
        .with_env_var("PUBLIC_URL", "http://ledger:18100")
        .with_ready_conditions(vec![WaitFor::healthcheck()]);
    let ledger = fleet.serve("ledger", req);
    let out = exec_ok(
        &ledger,
        &[
            "metabob-mcp",
            "ledger",
            "key",
            "create",
            "--data",
            "/data",
            "--org",
            "default",
            "--scopes",
            "read,write",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("key create --json");
    (ledger, v["key"].as_str().expect("a key").to_string())
}

fn attach_env(req: ContainerRequest<GenericImage>, key: &str) -> ContainerRequest<GenericImage> {
    req.with_env_var("METABOB_API_KEY", key)
        .with_env_var("DISCOVERY_ENDPOINT", "http://ledger:18100")
}

fn logs(c: &Running) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&c.stdout_to_vec().unwrap()),
        String::from_utf8_lossy(&c.stderr_to_vec().unwrap())
    )
}

/// A ledger and a git server on a fresh network, and one task recorded per `(file, details)`;
/// the task ids in that order.
struct World {
    fleet: Fleet,
    git: Running,
    ledger: Running,
    key: String,
    ids: Vec<String>,
}

const ORIGIN: &str = "git://git/app.git";

/// A ledger and a git server whose main holds `files`, on a fresh network; no tasks yet.
fn servers(files: &[&str]) -> World {
    images();
    let mut fleet = Fleet::new();
    let git = git_server(&mut fleet, files);
    let (ledger, key) = ledger(&mut fleet);
    World {
        fleet,
        git,
        ledger,
        key,
        ids: Vec::new(),
    }
}

fn world(tasks: &[(&str, &str)]) -> World {
    let files: Vec<&str> = tasks.iter().map(|(f, _)| *f).collect();
    let mut w = servers(&files);
    for (f, details) in tasks {
        w.record(f, &format!("fix {f}"), details);
    }
    w
}

impl World {
    /// Records a HIGH task on `file` through the ledger the one-off commands reach, and keeps
    /// its id.
    fn record(&mut self, file: &str, summary: &str, details: &str) {
        let out = self.mb(&[
            "finding",
            "record",
            "--origin",
            ORIGIN,
            "--category",
            "task",
            "--severity",
            "HIGH",
            "--file",
            file,
            "--summary",
            summary,
            "--details",
            details,
            "--json",
        ]);
        assert_eq!(out.code, 0, "record {file}: {out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
        self.ids
            .push(v["finding_ids"][0].as_str().expect("an id").to_string());
    }

    /// A one-off cell-image container attached to the ledger, running `entrypoint ARGS`.
    fn attached(&self, entrypoint: &str, args: &[&str]) -> Output {
        let req = self.fleet.on(image(CELL).with_entrypoint(entrypoint));
        self.fleet
            .run(attach_env(req, &self.key).with_cmd(args.iter().copied()))
    }

    /// `metabob-mcp ARGS` in a throwaway cell-image container on the network.
    fn mb(&self, args: &[&str]) -> Output {
        self.attached("metabob-mcp", args)
    }

    /// Starts a cell running the sample harness (or `harness`), with `extra` environment.
    fn cell(&mut self, alias: &str, harness: &str, extra: &[(&str, &str)]) -> Running {
        let harness_sh = repo()
            .join("examples/fleet/harness.sh")
            .display()
            .to_string();
        let mut req = attach_env(self.fleet.on(image(CELL)), &self.key)
            .with_env_var("ORIGIN", ORIGIN)
            .with_env_var("HARNESS", harness)
            .with_env_var("RETRY_MAX", "2")
            .with_mount(
                Mount::bind_mount(harness_sh, "/harness.sh").with_access_mode(AccessMode::ReadOnly),
            );
        for (k, v) in extra {
            req = req.with_env_var(*k, *v);
        }
        self.fleet.start(alias, req)
    }

    /// Waits for the container to exit (`docker wait`) and asserts its code, showing its log
    /// when it differs.
    fn exits(&self, cell: &Running, code: i32) {
        wait_for(
            &format!("{} exiting", cell.id()),
            Duration::from_secs(600),
            || !cell.is_running().unwrap(),
        );
        let got = exit_code(cell);
        assert_eq!(got, code, "{} exited {got}:\n{}", cell.id(), logs(cell));
    }

    /// A fresh pull on a scratch container: (exit, stdout).
    fn pull(&self) -> Output {
        self.mb(&[
            "task",
            "pull",
            "--origin",
            ORIGIN,
            "--task-dir",
            "/tmp/t",
            "--work-dir",
            "/tmp/w",
            "--json",
        ])
    }

    fn main_log(&self) -> String {
        exec_ok(
            &self.git,
            &["git", "-C", "/srv/app.git", "log", "--format=%B", "main"],
        )
    }

    fn fixes_on_main(&self, id: &str) -> usize {
        self.main_log()
            .matches(&format!("Fixes-Finding: {id}"))
            .count()
    }
}

fn closed_in(logs: &str, id: &str) -> usize {
    logs.matches(&format!("{id}: finding close exit 0, outcome closed"))
        .count()
}

fn wait_log(cell: &Running, needle: &str) {
    wait_for(
        &format!("{} logging {needle:?}", cell.id()),
        Duration::from_secs(60),
        || logs(cell).contains(needle),
    );
}

#[test]
fn a_fleet_of_four_cells_closes_eight_tasks_once_each_and_exits_0() {
    let t0 = Instant::now();
    images();
    let built = t0.elapsed();
    let files: Vec<String> = (1..=8).map(|n| format!("f{n}.py")).collect();
    let tasks: Vec<(&str, &str)> = files.iter().map(|f| (f.as_str(), "ref: main")).collect();
    let mut w = world(&tasks);

    let fleet_start = Instant::now();
    let cells: Vec<Running> = (1..=4)
        .map(|n| w.cell(&format!("cell{n}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let fleet_wall = fleet_start.elapsed();

    let all_logs: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all_logs, id), 1, "{id}:\n{all_logs}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} on main:\n{}", w.main_log());
    }
    assert_eq!(w.pull().code, 3, "nothing is left open");
    for f in &files {
        let text = exec_ok(
            &w.git,
            &["git", "-C", "/srv/app.git", "show", &format!("main:{f}")],
        );
        assert_eq!(text.matches("# fixed for ").count(), 1, "{f}:\n{text}");
    }
    eprintln!(
        "container fleet: images {built:?}, 4 cells x 8 tasks wall {fleet_wall:?}, test {:?}",
        t0.elapsed()
    );
}

#[test]
fn docker_stop_releases_the_claim_and_the_task_is_free_at_once() {
    let mut w = world(&[("a.py", "ref: main")]);
    let started = Instant::now();
    let cell = w.cell("cell1", "sleep 600", &[]);
    wait_log(&cell, "pulled ");
    eprintln!(
        "container cell: docker run to task pulled {:?}",
        started.elapsed()
    );
    // `docker stop -t 20`: SIGTERM, SIGKILL only after 20 s.
    cell.stop_with_timeout(Some(20)).expect("stop the cell");
    w.exits(&cell, 143);
    assert!(
        logs(&cell).contains("interrupted; releasing the claim"),
        "{}",
        logs(&cell)
    );
    let out = w.pull();
    assert_eq!(out.code, 0, "the released task is pulled at once: {out:?}");
    assert!(out.stdout.contains(&w.ids[0]), "{out:?}");
}

#[test]
fn a_killed_cell_restarted_resumes_its_task_and_a_lapsed_claim_goes_to_another_cell() {
    let mut w = world(&[("a.py", "ref: main"), ("b.py", "ref: main")]);
    // First run: the harness hangs; after a restart (same container, same hostname, so the
    // same claimer) it fixes.
    let slow_once = "if [ ! -e /tmp/once ]; then touch /tmp/once; sleep 600; fi; sh /harness.sh";
    let a = w.cell("cella", slow_once, &[("CLAIM_MINUTES", "1")]);
    wait_log(&a, "pulled ");
    let first = logs(&a);
    kill(&a);
    let held = w
        .ids
        .iter()
        .find(|id| first.contains(&format!("pulled {id}")))
        .expect("a pulled one of the tasks")
        .clone();
    let other = w.ids.iter().find(|id| **id != held).unwrap().clone();

    // A killed cell released nothing: a second, hanging cell takes the other task, and the
    // held one stays held until its claim lapses.
    let b = w.cell("cellb", slow_once, &[("CLAIM_MINUTES", "1")]);
    wait_log(&b, &format!("pulled {other}"));
    kill(&b);

    // Restarted, cell a resumes the task it still holds and then closes what is left.
    a.start().expect("restart cell a");
    w.exits(&a, 0);
    let a_logs = logs(&a);
    assert!(a_logs.contains(&format!("pulled {held}")), "{a_logs}");
    // Cell b's task came to cell a only after b's one-minute claim lapsed.
    assert_eq!(closed_in(&a_logs, &held), 1, "{a_logs}");
    assert_eq!(closed_in(&a_logs, &other), 1, "{a_logs}");
    assert!(a_logs.contains("held by others"), "{a_logs}");
    for id in &w.ids {
        assert_eq!(w.fixes_on_main(id), 1, "{id}:\n{}", w.main_log());
    }
}

#[test]
fn under_review_a_fix_on_its_task_branch_stays_pending_until_merged() {
    let mut w = world(&[("a.py", "ref: main\npush_to: task\nintegrate: review")]);
    let id = w.ids[0].clone();
    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, 0);
    assert!(
        logs(&cell).contains(&format!("{id}: finding close exit 0, outcome pending")),
        "{}",
        logs(&cell)
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    assert_eq!(w.pull().code, 3, "a pending task is not pulled again");

    exec_ok(
        &w.git,
        &[
            "sh",
            "-c",
            &format!(
                "set -e; git clone -q /srv/app.git /m; cd /m; git -c user.name=r -c user.email=r@x \
                 merge -q --no-ff origin/task/{id} -m 'merge task/{id}'; git push -q origin main"
            ),
        ],
    );
    let script = format!(
        "set -e; git clone -q {ORIGIN} /tmp/w; metabob-mcp finding close --work-dir /tmp/w \
         --commits origin/main~1..origin/task/{id} --target main --json"
    );
    let out = w.attached("sh", &["-c", &script]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("close --json");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["finding_id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{id} in {v}"));
    assert_eq!(f["outcome"], "closed", "{v}");
    assert_eq!(w.fixes_on_main(&id), 1);
}

impl World {
    /// The board's entries in `group`, as `task list --json` answers in a one-off container.
    fn board(&self, group: &str) -> Vec<serde_json::Value> {
        let out = self.mb(&["task", "list", "--json"]);
        assert_eq!(out.code, 0, "task list: {out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("task list --json");
        v["repositories"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r[group].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

#[test]
fn poison_tasks_are_parked_and_two_standing_cells_close_every_other_task() {
    // A refused ref, a ref the origin lacks, then three normal tasks.
    let mut w = world(&[
        ("a.py", "ref: ..bad"),
        ("b.py", "ref: no-such-branch"),
        ("c.py", "ref: main"),
        ("d.py", ""),
        ("e.py", ""),
    ]);
    let cells: Vec<Running> = (1..=2)
        .map(|n| w.cell(&format!("cell{n}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let l: String = cells.iter().map(logs).collect();
    for id in &w.ids[..2] {
        assert_eq!(closed_in(&l, id), 0, "{l}");
        assert!(l.contains(&format!("parked {id}: ")), "{id}:\n{l}");
    }
    for id in &w.ids[2..] {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    let parked: Vec<String> = w
        .board("parked")
        .iter()
        .map(|t| {
            assert!(
                t["reason"].as_str().is_some_and(|r| r.contains("ref")),
                "{t}"
            );
            t["task_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(parked.len(), 2, "{parked:?}");
    assert!(
        w.ids[..2].iter().all(|id| parked.contains(id)),
        "{parked:?}"
    );
}

#[test]
fn a_task_every_harness_fails_is_parked_by_two_cells_and_neither_cell_ends() {
    let mut w = world(&[("a.py", ""), ("b.py", "")]);
    let hopeless = w.ids[0].clone();
    // The harness gives up on a.py's task and fixes any other.
    let harness = format!(
        "if grep -q '\"task_id\": \"{hopeless}\"' \"$TASK_DIR/task.json\"; then exit 1; fi; \
         sh /harness.sh"
    );
    let a = w.cell("cella", &harness, &[]);
    let b = w.cell("cellb", &harness, &[]);
    w.exits(&a, 0);
    w.exits(&b, 0);
    let l = format!("{}{}", logs(&a), logs(&b));
    assert_eq!(closed_in(&l, &w.ids[1]), 1, "{l}");
    assert_eq!(closed_in(&l, &hopeless), 0, "{l}");
    let parked = w.board("parked");
    assert_eq!(parked.len(), 1, "{parked:?}\n{l}");
    let reason = parked[0]["reason"].as_str().unwrap();
    assert!(reason.contains("2 cells failed it"), "{reason}");
    assert!(
        reason.contains("cell-"),
        "the cells that tried it are named: {reason}"
    );
}

#[test]
fn a_cell_that_fails_fail_max_tasks_in_a_row_stops_with_exit_1_and_parks_nothing_alone() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cell = w.cell("cell1", "exit 1", &[("FAIL_MAX", "2")]);
    w.exits(&cell, 1);
    let l = logs(&cell);
    assert!(
        l.contains("2 tasks failed in a row (FAIL_MAX=2); stopping"),
        "{l}"
    );
    assert!(
        w.board("parked").is_empty(),
        "one cell's failures park nothing"
    );
    assert_eq!(w.board("open").len(), 3, "every task is back on the board");
}

/// A harness that gives its claim back from inside, as if its cell had paused past its claim,
/// and waits until cell-b holds the task; then `then`.
fn handover_harness(then: &str) -> String {
    format!(
        "metabob-mcp task release --task-dir \"$TASK_DIR\" --reason handover >/dev/null; \
         until metabob-mcp task list --json | grep -q '\"holder\": \"cell-b\"'; do sleep 1; done; \
         {then}"
    )
}

#[test]
fn a_cell_whose_claim_passed_to_another_pushes_nothing_keeps_its_commits_and_goes_on() {
    let mut w = world(&[("a.py", "")]);
    let id = w.ids[0].clone();
    // A commits its fix once B holds the task; its renewal loop stays quiet meanwhile, so only
    // the fence before the push can stop it.
    let a = w.cell(
        "cella",
        &handover_harness("sh /harness.sh"),
        &[("VESSEL_ID", "cell-a"), ("RENEW_EVERY", "600")],
    );
    wait_log(&a, "pulled ");
    // B works slowly, so A tries to push while B holds the task.
    let b = w.cell(
        "cellb",
        "sleep 8; sh /harness.sh",
        &[("VESSEL_ID", "cell-b")],
    );
    w.exits(&a, 0);
    w.exits(&b, 0);
    let (la, lb) = (logs(&a), logs(&b));
    assert!(
        la.contains(&format!("{id}: the claim is no longer this cell's (cell-b holds this claim, not cell-a); not pushing, not closing")),
        "{la}"
    );
    assert!(
        la.contains(&format!(
            "kept the commits as branch salvage/{id} in /home/cell/metabob-salvage/"
        )),
        "{la}"
    );
    assert_eq!(closed_in(&la, &id), 0, "{la}");
    assert_eq!(closed_in(&lb, &id), 1, "{lb}");
    assert_eq!(
        w.fixes_on_main(&id),
        1,
        "only B's fix reached the origin:\n{}",
        w.main_log()
    );
}

#[test]
fn a_renewal_that_finds_the_claim_taken_stops_the_harness_at_once() {
    let mut w = world(&[("a.py", "")]);
    let id = w.ids[0].clone();
    // A would work for ten minutes once B holds the task; its first renewal comes after B's
    // pull and finds the claim B's.
    let a = w.cell(
        "cella",
        &handover_harness("sleep 600; echo harness-finished"),
        &[("VESSEL_ID", "cell-a"), ("RENEW_EVERY", "15")],
    );
    wait_log(&a, "pulled ");
    let b = w.cell(
        "cellb",
        "sleep 30; sh /harness.sh",
        &[("VESSEL_ID", "cell-b")],
    );
    wait_log(
        &a,
        "the claim is no longer this cell's; stopping the harness",
    );
    w.exits(&b, 0);
    w.exits(&a, 0);
    let la = logs(&a);
    assert!(!la.contains("harness-finished"), "{la}");
    assert!(
        la.contains(&format!(
            "{id}: the claim is no longer this cell's (a renewal was refused)"
        )),
        "{la}"
    );
    assert_eq!(closed_in(&logs(&b), &id), 1);
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn three_cells_mid_task_wait_out_a_killed_and_restarted_ledger_and_close_every_task_once() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cells: Vec<Running> = (1..=3)
        .map(|n| {
            w.cell(
                &format!("cell{n}"),
                // Done while the ledger is away: the fence before the push waits it out.
                "sleep 4; sh /harness.sh",
                &[("RENEW_EVERY", "3")],
            )
        })
        .collect();
    for c in &cells {
        wait_log(c, "pulled ");
    }
    let ip = w
        .ledger
        .get_bridge_ip_address()
        .expect("the ledger's address");
    kill(&w.ledger);
    std::thread::sleep(Duration::from_secs(10));
    w.ledger.start().expect("restart the ledger");
    assert_eq!(
        w.ledger
            .get_bridge_ip_address()
            .expect("the ledger's address"),
        ip,
        "the restarted ledger keeps its address (the cells know it by /etc/hosts)"
    );
    for c in &cells {
        w.exits(c, 0);
    }
    let l: String = cells.iter().map(logs).collect();
    assert!(l.contains("the ledger does not answer; waiting"), "{l}");
    for id in &w.ids {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    assert!(w.board("claimed").is_empty(), "no claim is left held");
}

#[test]
fn a_git_server_down_mid_task_parks_nothing_and_every_task_closes_once_it_is_back() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cells: Vec<Running> = (1..=3)
        .map(|n| w.cell(&format!("cell{n}"), "sleep 4; sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        wait_log(c, "pulled ");
    }
    // Down while the harnesses work: their fetch before the push meets a dead server.
    let ip = w
        .git
        .get_bridge_ip_address()
        .expect("the git server's address");
    kill(&w.git);
    std::thread::sleep(Duration::from_secs(10));
    w.git.start().expect("restart the git server");
    assert_eq!(
        w.git
            .get_bridge_ip_address()
            .expect("the git server's address"),
        ip,
        "the restarted git server keeps its address (the cells know it by /etc/hosts)"
    );
    wait_for(
        "git daemon serving app.git again",
        Duration::from_secs(30),
        || exec(&w.git, &["git", "ls-remote", "git://127.0.0.1/app.git"]).code == 0,
    );
    for c in &cells {
        w.exits(c, 0);
    }
    // (A fetch may also just wait in its connect until the server is back: either way the
    // outage is waited out.)
    let l: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    assert!(
        w.board("parked").is_empty(),
        "an origin that was down parks nothing"
    );
}

/// A harness that, the first `n` times it runs in this container, lands a change to the same
/// lines of `a.py` on main while it works, so the cell's rebase conflicts; the fix itself is the
/// sample harness's.
fn racing_harness(n: u32) -> String {
    format!(
        "set -e; c=$(cat /tmp/raced 2>/dev/null || echo 0); \
         if [ \"$c\" -lt {n} ]; then echo $((c + 1)) > /tmp/raced; \
           rm -rf /tmp/other; git clone -q \"$ORIGIN\" /tmp/other; cd /tmp/other; \
           echo \"x = race $c\" > a.py; git commit -qam 'someone else'; git push -q origin main; \
           cd \"$WORK_DIR\"; fi; sh /harness.sh"
    )
}

/// One task on `a.py` with `details`, one cell whose harness races it `races` times (with
/// `extra` environment), run to exit `code`: the world, the task's id and the cell's log, which
/// names the first conflict.
fn raced(details: &str, races: u32, extra: &[(&str, &str)], code: i32) -> (World, String, String) {
    let mut w = world(&[("a.py", details)]);
    let id = w.ids[0].clone();
    let cell = w.cell("cell1", &racing_harness(races), extra);
    w.exits(&cell, code);
    let l = logs(&cell);
    assert!(
        l.contains(&format!("{id}: rebase onto origin/main conflicts")),
        "{l}"
    );
    (w, id, l)
}

#[test]
fn a_rebase_conflict_gives_the_task_back_and_the_cell_goes_on_to_close_it() {
    let (w, id, l) = raced("ref: main", 1, &[], 0);
    assert!(
        l.contains(&format!(
            "{id}: the claim is released; pulling the next task"
        )),
        "{l}"
    );
    assert_eq!(closed_in(&l, &id), 1, "{l}");
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn more_conflicts_in_a_row_than_conflict_max_stop_the_cell_with_exit_1() {
    let (w, id, l) = raced("ref: main", 100, &[("CONFLICT_MAX", "1")], 1);
    assert!(
        l.contains("2 rebase conflicts in a row (CONFLICT_MAX=1); stopping"),
        "{l}"
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    let out = w.pull();
    assert_eq!(out.code, 0, "the released task is pulled at once: {out:?}");
    assert!(out.stdout.contains(&id), "{out:?}");
}

#[test]
fn under_conflicts_retry_the_same_cell_redoes_the_task_on_the_fresh_target_keeping_its_claim() {
    let (w, id, l) = raced("ref: main\nconflicts: retry", 1, &[], 0);
    assert!(
        l.contains(&format!(
            "{id}: keeping the claim; running the harness again on the fresh origin/main (1 of 2)"
        )),
        "{l}"
    );
    assert!(
        !l.contains("the claim is released"),
        "the claim was never given back: {l}"
    );
    assert_eq!(
        l.matches(&format!("pulled {id} ")).count(),
        1,
        "pulled once: {l}"
    );
    assert_eq!(closed_in(&l, &id), 1, "{l}");
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn three_cells_on_six_tasks_that_conflict_in_pairs_close_each_once_and_all_exit_0() {
    // Two tasks per file: the sample harness appends to the end of the file, so the second
    // fix of a pair conflicts with the first whenever both are worked on at once.
    let mut w = servers(&["a.py", "b.py", "c.py"]);
    for f in ["a.py", "b.py", "c.py"] {
        for n in 1..=2 {
            w.record(f, &format!("fix {f}, part {n}"), "ref: main");
        }
    }
    let cells: Vec<Running> = (1..=3)
        .map(|i| w.cell(&format!("cell{i}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let all: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all, id), 1, "{id} closed once: {all}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} fixed once on main");
    }
}

#[test]
fn a_goal_dispatched_over_mcp_is_pulled_and_closed_by_a_cell() {
    let mut w = servers(&["g.py"]);
    let goal = serde_json::json!({
        "goal": "make g.py say it was fixed",
        "variables": {"repo": ORIGIN, "files": ["g.py"], "ref": "main"},
    });
    let out = w.mb(&[
        "tool",
        "call",
        "run_goal_async",
        "--args",
        &goal.to_string(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let dispatch = out
        .stdout
        .split_whitespace()
        .find(|t| t.starts_with("dispatch_"))
        .unwrap_or_else(|| panic!("no dispatch id in {out:?}"))
        .trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .to_string();

    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, 0);
    let log = logs(&cell);
    assert!(
        log.contains("finding close exit 0, outcome closed"),
        "{log}"
    );
    let status = w.mb(&[
        "tool",
        "call",
        "goal_status",
        "--args",
        &serde_json::json!({"dispatch_id": dispatch}).to_string(),
    ]);
    assert_eq!(status.code, 0, "{status:?}");
    assert!(
        status.stdout.starts_with("reached: yes"),
        "{}",
        status.stdout
    );
    assert_eq!(w.pull().code, 3, "nothing is left open");
}

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
    // empty database are tests/ledger.rs's concern.
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

/// `scripts/fleet.sh ARGS` from the checkout, bounded by `timeout`, with this build's binary and
/// the offline base, under the compose project `project`.
fn fleet_sh(project: &str, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("600")
        .arg(repo().join("scripts/fleet.sh"))
        .args(args)
        .env("METABOB_BIN", bin())
        .env("BASE_IMAGE", BASE)
        .env("FLEET_PROJECT", project)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/fleet.sh");
    Output::from(out)
}

/// Takes the fleet down however the test ends.
struct FleetDown(String);

impl Drop for FleetDown {
    fn drop(&mut self) {
        let out = fleet_sh(&self.0, &["down"]);
        if out.code != 0 {
            eprintln!("scripts/fleet.sh down: {out:?}");
        }
    }
}

#[test]
fn fleet_sh_brings_up_three_cells_that_close_a_recorded_task_shown_by_status() {
    images();
    let project = format!("mbtest-fleet-{}", std::process::id());
    let _down = FleetDown(project.clone());
    let up = fleet_sh(&project, &["up", "3"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr.contains("3 cells are up on git://git/app.git"),
        "{up:?}"
    );

    let out = fleet_sh(
        &project,
        &[
            "record",
            "--summary",
            "greet says hello twice",
            "--file",
            "greet.py",
            // No --severity: the script's header says it defaults.
            "--details",
            "ref: main",
            "--json",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
    let id = v["finding_ids"][0].as_str().expect("an id").to_string();

    // The standing cells poll for work; the board shows the task closed by one of them.
    let mut last = None;
    wait_for(
        &format!("{id} closed on the board"),
        Duration::from_secs(180),
        || {
            let status = fleet_sh(&project, &["status"]);
            let closed = status.code == 0
                && status
                    .stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with("closed") && l.contains(&id));
            last = Some(status);
            closed
        },
    );
    let status = last.expect("status ran");
    assert!(status.stdout.contains("cell cell-"), "{status:?}");
    // All three are still up, waiting for the next task.
    let running = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=com.docker.compose.project={project}"))
        .args(["--filter", "label=com.docker.compose.service=cell"])
        .output()
        .expect("docker ps");
    let running = String::from_utf8_lossy(&running.stdout).lines().count();
    assert_eq!(running, 3, "three cells running");

    // Without a fleet, each step says so in one line.
    drop(_down);
    let out = fleet_sh(&project, &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");
}
