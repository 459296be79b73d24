//! The container cell in real containers: the base image built offline (images/base/build.sh),
//! the shipped Dockerfiles built on it, and a ledger, a git daemon and cells on a user-defined
//! Docker network. Docker is driven through the testcontainers crate (the issue names it); the
//! one operation it lacks, kill, goes to the Docker engine API through the bollard client it
//! re-exports. No Docker is a failure, never a skip.

mod cells;
mod claims;
mod conflicts;
mod failing;
mod fleet_sh;
mod outages;
mod port_map;
mod postgres;
mod swarm;

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
        // The crate gives the container no name of its own to ask itself by.
        .with_env_var("HEALTH_URL", "http://127.0.0.1:18100")
        .with_ready_conditions(vec![WaitFor::healthcheck()]);
    let ledger = fleet.serve("ledger", req);
    let key = cells_key(&ledger);
    (ledger, key)
}

/// A read-write key for the cells, made in the ledger container's own data.
fn cells_key(ledger: &Running) -> String {
    let out = exec_ok(
        ledger,
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
    v["key"].as_str().expect("a key").to_string()
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

/// This host's address on Docker's default bridge (docker0): a container on any of the
/// engine's bridge networks reaches the host there, as it would reach a forge on the LAN.
fn host_address_for_containers() -> std::net::Ipv4Addr {
    let subnet = Command::new("docker")
        .args(["network", "inspect", "bridge", "-f"])
        .arg("{{range .IPAM.Config}}{{.Subnet}} {{end}}")
        .output()
        .expect("docker network inspect");
    let subnet = String::from_utf8_lossy(&subnet.stdout).into_owned();
    let (net, bits) = subnet
        .split_whitespace()
        .find_map(|s| {
            let (a, b) = s.split_once('/')?;
            Some((
                a.parse::<std::net::Ipv4Addr>().ok()?,
                b.parse::<u32>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("the bridge network's IPv4 subnet: {subnet:?}"));
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    let addresses = Command::new("hostname")
        .arg("-I")
        .output()
        .expect("hostname -I");
    String::from_utf8_lossy(&addresses.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| u32::from(*a) & mask == u32::from(net) & mask)
        .unwrap_or_else(|| panic!("no address of this host is on the bridge {subnet}"))
}

/// The operator's own forge: a bare `app.git` holding `files`, served by the real `git
/// http-backend` over https with a certificate a private CA signed, demanding a Basic login,
/// on this host's address on Docker's bridge; and the credentials file and CA an operator
/// hands the fleet for it.
pub struct Forge {
    pub bare: PathBuf,
    pub url: String,
    pub host: std::net::Ipv4Addr,
    pub port: u16,
    credentials: PathBuf,
    ca: String,
    _pki: crate::support::Pki,
    _server: crate::support::Reaped,
}

impl Forge {
    pub const PASSWORD: &'static str = "fl33t-Tok3n-q7";

    pub fn new(env: &crate::support::TestEnv, files: &[(&str, &str)]) -> Forge {
        use std::os::unix::fs::PermissionsExt;
        let (bare, _) = env.origin("app", files);
        let host = host_address_for_containers();
        // https: gix never sends a login over plain http.
        let pki = crate::support::Pki::new();
        pki.leaf("forge", &format!("IP:{host}"));
        let (port, server) = crate::support::git_http_host(
            bare.parent().expect("origins"),
            Some((pki.path("forge.pem"), pki.path("forge.key"))),
            Some(&format!("cell:{}", Self::PASSWORD)),
            &host.to_string(),
        );
        let credentials = env.path("git-credentials");
        let line = format!("https://cell:{}@{host}:{port}\n", Self::PASSWORD);
        std::fs::write(&credentials, line).expect("write the credentials");
        std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the credentials");
        Forge {
            url: format!("https://{host}:{port}/app.git"),
            bare,
            host,
            port,
            credentials,
            ca: pki.ca(),
            _pki: pki,
            _server: server,
        }
    }

    /// What fleet.sh is given for it: FLEET_GIT_CREDENTIALS and FLEET_GIT_CA.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [
            (
                "FLEET_GIT_CREDENTIALS",
                self.credentials.display().to_string(),
            ),
            ("FLEET_GIT_CA", self.ca.clone()),
        ]
    }
}
