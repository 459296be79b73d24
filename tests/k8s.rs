//! The Kubernetes manifests (`examples/k8s/`), checked offline since no cluster runs here: every
//! manifest validates against Kubernetes 1.30's schemas in strict mode (`kubernetes-validate`,
//! whose schemas ship in its wheel), `checkov` finds no failed check and every check it skips
//! carries its reason, and the facts neither tool knows: each container runs as its image's
//! non-root user with a read-only root, and every variable the cells and the ledger set is one
//! the binary (or the image's entrypoint) reads. Both tools live in the venv scripts/test.sh
//! makes; a missing one fails the test, since skipping would pass a suite that checked nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

const DIR: &str = "examples/k8s";
/// The Kubernetes version the schemas are those of.
const K8S_VERSION: &str = "1.30.0";
const INSTALL: &str = "scripts/test.sh pip-installs it into target/mcp-venv (by hand: \
                       target/mcp-venv/bin/pip install kubernetes-validate checkov pyyaml)";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The venv's python, as METABOB_TEST_PYTHON names it (scripts/test.sh exports it).
fn python() -> PathBuf {
    std::env::var_os("METABOB_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/mcp-venv/bin/python"))
}

/// A tool beside the venv's python, or the test fails saying how to install it.
fn tool(name: &str) -> PathBuf {
    let python = python();
    let path = python.parent().unwrap_or_else(|| Path::new(".")).join(name);
    let runs = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        runs,
        "{} does not run (METABOB_TEST_PYTHON={}): {INSTALL}",
        path.display(),
        python.display()
    );
    path
}

/// Every YAML file under examples/k8s, relative to the repository, sorted.
fn files() -> Vec<String> {
    fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, into);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                into.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&repo().join(DIR), &mut found);
    let mut rel: Vec<String> = found
        .iter()
        .map(|p| {
            p.strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    rel.sort();
    rel
}

/// Each file's documents as pyyaml reads them (a comment-only file has none), parsed once.
fn docs() -> &'static Vec<(String, Vec<Value>)> {
    static DOCS: OnceLock<Vec<(String, Vec<Value>)>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let files = files();
        let out = Command::new(python())
            .env_clear()
            .current_dir(repo())
            .args([
                "-c",
                "import json, sys, yaml\n\
                 json.dump([[d for d in yaml.safe_load_all(open(f)) if d is not None]\n\
                 for f in sys.argv[1:]], sys.stdout)",
            ])
            .args(&files)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}: {INSTALL}", python().display()));
        assert!(
            out.status.success(),
            "the manifests do not parse with pyyaml: {}\n({INSTALL})",
            String::from_utf8_lossy(&out.stderr)
        );
        let parsed: Vec<Vec<Value>> = serde_json::from_slice(&out.stdout).expect("pyyaml's JSON");
        files.into_iter().zip(parsed).collect()
    })
}

/// The Kubernetes objects (not kustomize's own files), with the file each is in.
fn objects() -> Vec<(&'static str, &'static Value)> {
    docs()
        .iter()
        .flat_map(|(f, ds)| ds.iter().map(move |d| (f.as_str(), d)))
        .filter(|(_, d)| {
            !d["apiVersion"]
                .as_str()
                .unwrap_or("")
                .starts_with("kustomize.config")
        })
        .collect()
}

/// Every workload's pod template: (file, kind/name, pod spec).
fn pods() -> Vec<(&'static str, String, &'static Value)> {
    let pods: Vec<_> = objects()
        .into_iter()
        .filter(|(_, o)| {
            matches!(
                o["kind"].as_str(),
                Some("Deployment" | "StatefulSet" | "Job")
            )
        })
        .map(|(f, o)| {
            let name = kind_name(o);
            (f, name, &o["spec"]["template"]["spec"])
        })
        .collect();
    assert_eq!(
        pods.len(),
        4,
        "the ledger twice (SQLite, PostgreSQL), the cells twice: {pods:?}"
    );
    pods
}

/// `Kind/name`, e.g. `Deployment/cell`.
fn kind_name(o: &Value) -> String {
    format!(
        "{}/{}",
        o["kind"].as_str().unwrap(),
        o["metadata"]["name"].as_str().unwrap()
    )
}

fn containers(pod: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod[*k].as_array())
        .flatten()
        .collect()
}

fn env_names(c: &Value) -> BTreeSet<String> {
    c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn env<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["env"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("{} sets no {name}", c["name"]))
}

/// The uid an image's Dockerfile gives its user (`useradd ... --uid N`).
fn image_uid(dockerfile: &str) -> u64 {
    let text = read(dockerfile);
    let after = text.split("--uid ").nth(1).expect("useradd --uid");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a uid")
}

/// All of the binary's own source: a variable it reads is a string literal there.
fn sources() -> &'static str {
    static CODE: OnceLock<String> = OnceLock::new();
    CODE.get_or_init(|| {
        fn walk(dir: &Path, into: &mut String) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries {
                let path = e.unwrap().path();
                if path.is_dir() {
                    walk(&path, into);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    into.push_str(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut code = String::new();
        walk(&repo().join("src"), &mut code);
        for krate in std::fs::read_dir(repo().join("crates")).unwrap() {
            walk(&krate.unwrap().path().join("src"), &mut code);
        }
        code
    })
}

#[test]
fn every_manifest_validates_strictly_against_the_kubernetes_schemas() {
    let validate = tool("kubernetes-validate");
    let manifests: Vec<&str> = docs()
        .iter()
        .filter(|(_, ds)| {
            !ds.is_empty()
                && ds.iter().all(|d| {
                    !d["apiVersion"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("kustomize.config")
                })
        })
        .map(|(f, _)| f.as_str())
        .collect();
    let kinds: BTreeSet<&str> = objects()
        .iter()
        .filter_map(|(_, o)| o["kind"].as_str())
        .collect();
    for kind in [
        "Namespace",
        "Service",
        "StatefulSet",
        "Deployment",
        "Job",
        "NetworkPolicy",
    ] {
        assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
    // The schemas are in the wheel (`-k` picks them): no network is asked.
    let out = Command::new(&validate)
        .current_dir(repo())
        .args(["--strict", "--quiet", "-k", K8S_VERSION])
        .args(&manifests)
        .output()
        .expect("run kubernetes-validate");
    assert!(
        out.status.success(),
        "kubernetes-validate --strict -k {K8S_VERSION} {manifests:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn checkov_fails_no_check_and_every_skipped_check_says_why() {
    let checkov = tool("checkov");
    // --skip-download: no guideline or module fetch; the checks are in the package.
    let out = Command::new(&checkov)
        .current_dir(repo())
        .args(["-d", DIR, "--framework", "kubernetes", "--skip-download"])
        .args(["--compact", "-o", "json"])
        .env("BC_SKIP_MAPPING", "TRUE")
        .stdin(Stdio::null())
        .output()
        .expect("run checkov");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "checkov's JSON: {e}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // One framework is one report; several would be a list of them.
    let report = report.as_array().map_or(&report, |rs| &rs[0]);
    let summary = &report["summary"];
    let failed: Vec<String> = report["results"]["failed_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{} {} ({})", c["check_id"], c["resource"], c["file_path"]))
        .collect();
    assert!(failed.is_empty(), "checkov failed checks: {failed:#?}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["parsing_errors"], 0, "{summary}");
    assert!(
        summary["passed"].as_u64().unwrap_or(0) > 100
            && summary["resource_count"].as_u64().unwrap_or(0) >= 8,
        "checkov checked next to nothing: {summary}"
    );
    assert!(out.status.success(), "checkov exited {:?}", out.status);
    for c in report["results"]["skipped_checks"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let why = c["check_result"]["suppress_comment"].as_str().unwrap_or("");
        assert!(
            why.split_whitespace().count() >= 5,
            "{} on {} is skipped without a reason: {why:?}",
            c["check_id"],
            c["resource"]
        );
    }
    // Every skip annotation names a check and its reason, whether checkov used it or not.
    for (file, o) in objects() {
        let Some(notes) = o["metadata"]["annotations"].as_object() else {
            continue;
        };
        for (k, v) in notes
            .iter()
            .filter(|(k, _)| k.starts_with("checkov.io/skip"))
        {
            let (id, why) = v.as_str().unwrap().split_once('=').unwrap_or(("", ""));
            assert!(
                id.starts_with("CKV") && why.split_whitespace().count() >= 5,
                "{file}: {k}: {v} names no check and reason"
            );
        }
    }
}

#[test]
fn every_container_runs_as_its_images_user_on_a_read_only_root() {
    let cell_uid = image_uid("images/cell/Dockerfile");
    let ledger_uid = image_uid("images/ledger/Dockerfile");
    for (file, name, pod) in pods() {
        let text = read(file);
        let psc = &pod["securityContext"];
        assert_eq!(psc["runAsNonRoot"], true, "{file}: {name}");
        assert_eq!(
            psc["seccompProfile"]["type"], "RuntimeDefault",
            "{file}: {name}"
        );
        assert_eq!(pod["automountServiceAccountToken"], false, "{file}: {name}");
        for c in containers(pod) {
            let image = c["image"].as_str().unwrap();
            let (repo_name, tag) = image.rsplit_once(':').expect("a tagged image");
            assert!(
                tag != "latest" && !tag.is_empty(),
                "{file}: {image} is not pinned"
            );
            assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{file}: {image}");
            let uid = match repo_name.rsplit('/').next().unwrap() {
                "metabob-cell" => cell_uid,
                "metabob-ledger" => ledger_uid,
                other => panic!("{file}: an image of ours expected, not {other}"),
            };
            let sc = &c["securityContext"];
            let pick = |k: &str| {
                if sc[k].is_null() { &psc[k] } else { &sc[k] }
            };
            assert_eq!(pick("runAsNonRoot"), true, "{file}: {image}");
            assert_eq!(pick("runAsUser").as_u64(), Some(uid), "{file}: {image}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{file}: {image}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{file}: {image}"
            );
            assert_eq!(
                pick("seccompProfile")["type"],
                "RuntimeDefault",
                "{file}: {image}"
            );
            match sc["readOnlyRootFilesystem"].as_bool() {
                Some(true) => {}
                // A writable root needs its reason on the line above.
                Some(false) => {
                    let lines: Vec<&str> = text.lines().collect();
                    let i = lines
                        .iter()
                        .position(|l| l.trim() == "readOnlyRootFilesystem: false")
                        .unwrap();
                    assert!(
                        i > 0 && lines[i - 1].trim().starts_with('#'),
                        "{file}: {image}: readOnlyRootFilesystem false without a comment why"
                    );
                }
                None => panic!("{file}: {image}: readOnlyRootFilesystem is not set"),
            }
            for (kind, res) in [
                ("requests", "cpu"),
                ("requests", "memory"),
                ("limits", "cpu"),
                ("limits", "memory"),
            ] {
                assert!(
                    c["resources"][kind][res].is_string(),
                    "{file}: {image}: no resources.{kind}.{res}"
                );
            }
            // With a read-only root, what the process writes is a volume: the cell's clone, task,
            // HOME, /tmp and salvage directory, the ledger's /data and /tmp.
            let mounts: BTreeSet<&str> = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["mountPath"].as_str().unwrap())
                .collect();
            let writes: &[&str] = if uid == cell_uid {
                &["/work", "/task", "/home/cell", "/tmp", "/salvage"]
            } else if name.starts_with("StatefulSet/") {
                &["/data", "/tmp"]
            } else {
                &["/tmp"]
            };
            for w in writes {
                assert!(
                    mounts.contains(w),
                    "{file}: {image} writes {w}, which is no volume"
                );
            }
        }
    }
}

#[test]
fn the_cells_and_the_ledger_set_only_variables_that_are_read() {
    let code = sources();
    let ledger_image = read("images/ledger/Dockerfile");
    let mut cells = 0;
    for (file, name, pod) in pods() {
        for c in containers(pod) {
            let names = env_names(c);
            // A name another value expands as $(NAME) is the manifest's own.
            let expanded: BTreeSet<String> = names
                .iter()
                .filter(|n| {
                    c["env"].as_array().unwrap().iter().any(|e| {
                        e["value"]
                            .as_str()
                            .is_some_and(|v| v.contains(&format!("$({n})")))
                    })
                })
                .cloned()
                .collect();
            let is_cell = c["image"].as_str().unwrap().contains("metabob-cell");
            for n in names.difference(&expanded) {
                let read_by_image = !is_cell && ledger_image.contains(&format!("${n}"));
                assert!(
                    code.contains(&format!("\"{n}\"")) || read_by_image,
                    "{file}: {name} sets {n}, which nothing of ours reads"
                );
            }
            if is_cell {
                cells += 1;
                for n in [
                    "DISCOVERY_ENDPOINT",
                    "METABOB_API_KEY",
                    "ORIGIN",
                    "HARNESS",
                    "ON_EMPTY",
                ] {
                    assert!(names.contains(n), "{file}: {name} sets no {n}");
                }
                assert_eq!(
                    env(c, "DISCOVERY_ENDPOINT")["value"],
                    "https://ledger:18100"
                );
                assert_eq!(env(c, "METABOB_EXTRA_CA_CERTS")["value"], "/tls/ca.crt");
                let key = &env(c, "METABOB_API_KEY")["valueFrom"]["secretKeyRef"];
                assert!(
                    key["name"].is_string() && key["key"].is_string(),
                    "{file}: the key from a Secret"
                );
                // A cell mounts the CA of ledger-tls, never the ledger's private key.
                let tls = pod["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["secret"]["secretName"] == "ledger-tls")
                    .expect("the CA from ledger-tls");
                assert_eq!(
                    tls["secret"]["items"],
                    serde_json::json!([{"key": "ca.crt", "path": "ca.crt"}]),
                    "{file}: {name}"
                );
                if name.starts_with("Job/") {
                    assert_eq!(env(c, "ON_EMPTY")["value"], "exit", "{file}");
                    let job = objects()
                        .into_iter()
                        .find(|(f, o)| *f == file && o["kind"] == "Job")
                        .unwrap()
                        .1;
                    assert_eq!(job["spec"]["completionMode"], "Indexed", "{file}");
                    let vessel = env(c, "VESSEL_ID")["value"].as_str().unwrap();
                    let (_, var) = vessel.split_once("$(").expect("VESSEL_ID from the index");
                    let var = var.trim_end_matches(')');
                    assert_eq!(
                        env(c, var)["valueFrom"]["fieldRef"]["fieldPath"],
                        "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                        "{file}"
                    );
                } else {
                    assert_eq!(env(c, "ON_EMPTY")["value"], "wait", "{file}: {name}");
                }
            } else {
                assert_eq!(
                    env(c, "PUBLIC_URL")["value"],
                    "https://ledger:18100",
                    "{file}"
                );
                assert_eq!(
                    env(c, "METABOB_LEDGER_TLS_CERT")["value"],
                    "/tls/tls.crt",
                    "{file}"
                );
                assert_eq!(
                    env(c, "METABOB_LEDGER_TLS_KEY")["value"],
                    "/tls/tls.key",
                    "{file}"
                );
                let probe = c["readinessProbe"]["exec"]["command"].to_string();
                assert!(
                    probe.contains("\"health\"") && probe.contains("https://ledger:18100"),
                    "{file}: the readiness probe is `ledger health` at the cells' address: {probe}"
                );
                assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS", "{file}");
            }
        }
    }
    assert_eq!(cells, 2, "the Deployment and the Job");
}

#[test]
fn only_cells_reach_the_ledger_and_the_kustomizations_name_real_files() {
    let policies: Vec<&Value> = objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == "NetworkPolicy")
        .map(|(_, o)| o)
        .collect();
    let ledger = policies
        .iter()
        .find(|p| p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "ledger")
        .expect("a NetworkPolicy for the ledger");
    let rules = ledger["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{ledger}");
    let from = rules[0]["from"].as_array().unwrap();
    assert_eq!(from.len(), 1, "only pods by label: {ledger}");
    let admitted = from[0]["podSelector"]["matchLabels"]
        .as_object()
        .expect("a pod label");
    assert!(
        from[0]["namespaceSelector"].is_null(),
        "this namespace only"
    );
    assert_eq!(
        rules[0]["ports"],
        serde_json::json!([{"protocol": "TCP", "port": 18100}])
    );
    // Every cell carries the admitted labels, and no ledger does.
    for (file, name, _) in pods() {
        let o = objects()
            .into_iter()
            .find(|(f, o)| *f == file && kind_name(o) == name)
            .unwrap()
            .1;
        let labels = o["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        let has = admitted.iter().all(|(k, v)| labels.get(k) == Some(v));
        assert_eq!(
            has,
            !name.contains("ledger"),
            "{file}: {name}'s labels {labels:?}"
        );
    }
    for (file, ds) in docs() {
        for d in ds.iter().filter(|d| d["kind"] == "Kustomization") {
            let dir = Path::new(file).parent().unwrap();
            for r in d["resources"].as_array().unwrap() {
                let p = repo().join(dir).join(r.as_str().unwrap());
                assert!(p.exists(), "{file} names {r}, which is missing");
            }
        }
    }
}
