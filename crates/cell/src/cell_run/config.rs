//! The cell's settings (SPEC.md §The cell entrypoint): one variable each, as the entrypoint
//! script read them, with the same defaults; a flag of `cell run` sets the variable first. All
//! are read and checked once at start, and a bad value is one line naming it.

use std::path::PathBuf;
use std::time::Duration;

use metabob_process::env::Env;

/// A default fit for an agent: long enough for a real fix with its tests, short enough that a
/// hung harness gives its task back within the working day.
pub const HARNESS_TIMEOUT_DEFAULT_S: u64 = 7_200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Clone, Debug)]
pub struct CellConfig {
    pub origin: String,
    pub harness: String,
    pub task_dir: PathBuf,
    pub work_dir: PathBuf,
    pub claim_minutes: i64,
    pub renew_every: Duration,
    pub retry_max_s: u64,
    pub push_tries: u32,
    pub conflict_retries: u32,
    pub fail_max: u32,
    pub park_after: usize,
    pub ledger_wait: Duration,
    pub origin_wait: Duration,
    pub harness_timeout: Duration,
    pub salvage_dir: PathBuf,
    pub wait_when_empty: bool,
    pub idle_poll_s: u64,
    pub vessel_id: String,
    pub log_format: LogFormat,
    /// Variables that no longer act, named once in the log at start.
    pub retired: Vec<&'static str>,
}

/// A setting that cannot be used: the one line says which and what it must be.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// What the clone check said of ORIGIN (its hint names the forms a clone takes).
    #[error("ORIGIN: {0}")]
    Origin(#[from] metabob_git::BadOrigin),
    #[error("{0} is not set; it must name {1}")]
    Missing(&'static str, &'static str),
    #[error("{name} is {value:?}; it must be {want}")]
    Invalid {
        name: &'static str,
        value: String,
        want: String,
    },
}

impl metabob_wire::report::Hint for ConfigError {
    fn hint(&self) -> Option<String> {
        match self {
            ConfigError::Origin(e) => e.hint(),
            ConfigError::Missing(..) | ConfigError::Invalid { .. } => None,
        }
    }
}

/// Every setting's variable; `cell run` has a flag for each (its help names the variable).
pub const SETTINGS: &[&str] = &[
    "ORIGIN",
    "HARNESS",
    "TASK_DIR",
    "WORK_DIR",
    "CLAIM_MINUTES",
    "RENEW_EVERY",
    "RETRY_MAX",
    "PUSH_TRIES",
    "CONFLICT_RETRIES",
    "FAIL_MAX",
    "METABOB_PARK_AFTER",
    "LEDGER_WAIT",
    "ORIGIN_WAIT",
    "HARNESS_TIMEOUT",
    "SALVAGE_DIR",
    "ON_EMPTY",
    "IDLE_POLL",
    "VESSEL_ID",
    "METABOB_LOG_FORMAT",
];

/// Variables the loop reads besides its settings: the identity its commits carry when the
/// machine has none of its own (`super::git::Git::new`).
pub const ALSO_READ: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// Variables the script read that no longer act: a conflict now counts like a failure.
const RETIRED: &[&str] = &["CONFLICT_MAX"];

fn number(
    env: &Env,
    name: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(raw) = env.get(name) else {
        return Ok(default);
    };
    raw.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| ConfigError::Invalid {
            name,
            value: metabob_wire::text::one_line(raw, 40),
            want: format!("a whole number from {min} to {max}"),
        })
}

fn required(env: &Env, name: &'static str, what: &'static str) -> Result<String, ConfigError> {
    env.get(name)
        .map(str::to_owned)
        .ok_or(ConfigError::Missing(name, what))
}

impl CellConfig {
    /// Reads and checks every setting; `host` is this machine's name, for the default identity.
    pub fn from_env(env: &Env, host: &str) -> Result<CellConfig, ConfigError> {
        let origin = required(env, "ORIGIN", "the repository's git URL")?;
        metabob_git::check_origin(&origin)?;
        let harness = required(env, "HARNESS", "the command that works on the task")?;
        let claim_minutes = number(env, "CLAIM_MINUTES", 60, 1, 240)?;
        // A third of the claim: two renewals may fail before it lapses.
        let renew_every = number(
            env,
            "RENEW_EVERY",
            claim_minutes * 20,
            1,
            claim_minutes * 60,
        )?;
        let on_empty = env.get("ON_EMPTY").unwrap_or("exit");
        let wait_when_empty = match on_empty {
            "exit" => false,
            "wait" => true,
            other => {
                return Err(ConfigError::Invalid {
                    name: "ON_EMPTY",
                    value: metabob_wire::text::one_line(other, 40),
                    want: "exit or wait".into(),
                });
            }
        };
        let log_format = match env.get("METABOB_LOG_FORMAT").unwrap_or("human") {
            "human" => LogFormat::Human,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::Invalid {
                    name: "METABOB_LOG_FORMAT",
                    value: metabob_wire::text::one_line(other, 40),
                    want: "human or json".into(),
                });
            }
        };
        let home = env.home().unwrap_or_else(|| PathBuf::from("/tmp"));
        let vessel_id = match env.get("VESSEL_ID") {
            Some(v) => v.to_owned(),
            None => format!("cell-{host}"),
        };
        let path =
            |name: &str, default: PathBuf| env.get(name).map(PathBuf::from).unwrap_or(default);
        let secs = Duration::from_secs;
        Ok(CellConfig {
            origin,
            harness,
            task_dir: path("TASK_DIR", "/task".into()),
            work_dir: path("WORK_DIR", "/work".into()),
            claim_minutes: claim_minutes as i64,
            renew_every: secs(renew_every),
            retry_max_s: number(env, "RETRY_MAX", 60, 1, 3_600)?,
            push_tries: number(env, "PUSH_TRIES", 5, 1, 100)? as u32,
            conflict_retries: number(env, "CONFLICT_RETRIES", 2, 0, 100)? as u32,
            fail_max: number(env, "FAIL_MAX", 3, 1, 1_000)? as u32,
            park_after: number(env, "METABOB_PARK_AFTER", 2, 1, 100)? as usize,
            ledger_wait: secs(number(env, "LEDGER_WAIT", 600, 0, 86_400)?),
            origin_wait: secs(number(env, "ORIGIN_WAIT", 600, 0, 86_400)?),
            harness_timeout: secs(number(
                env,
                "HARNESS_TIMEOUT",
                HARNESS_TIMEOUT_DEFAULT_S,
                1,
                7 * 86_400,
            )?),
            salvage_dir: path("SALVAGE_DIR", home.join("metabob-salvage")),
            wait_when_empty,
            idle_poll_s: number(env, "IDLE_POLL", 10, 1, 3_600)?,
            vessel_id,
            log_format,
            retired: RETIRED.iter().copied().filter(|v| env.is_set(v)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        let mut all = vec![
            ("ORIGIN".to_string(), "https://git.lan/app.git".to_string()),
            ("HARNESS".to_string(), "true".to_string()),
            ("HOME".to_string(), "/home/cell".to_string()),
        ];
        all.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Env::new(all, "/")
    }

    #[test]
    fn the_defaults_are_the_scripts() {
        let c = CellConfig::from_env(&env(&[]), "box").expect("valid");
        assert_eq!(c.task_dir, PathBuf::from("/task"));
        assert_eq!(c.work_dir, PathBuf::from("/work"));
        assert_eq!(c.claim_minutes, 60);
        assert_eq!(c.renew_every, Duration::from_secs(1_200));
        assert_eq!(
            (
                c.retry_max_s,
                c.push_tries,
                c.conflict_retries,
                c.fail_max,
                c.park_after
            ),
            (60, 5, 2, 3, 2)
        );
        assert_eq!(c.ledger_wait, Duration::from_secs(600));
        assert_eq!(c.harness_timeout, Duration::from_secs(7_200));
        assert_eq!(c.salvage_dir, PathBuf::from("/home/cell/metabob-salvage"));
        assert!(!c.wait_when_empty);
        assert_eq!(c.vessel_id, "cell-box");
        assert_eq!(c.log_format, LogFormat::Human);
        assert!(c.retired.is_empty());
    }

    #[test]
    fn each_bad_value_is_one_line_naming_it() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("FAIL_MAX", "many")],
                "FAIL_MAX is \"many\"; it must be a whole number from 1 to 1000",
            ),
            (
                &[("CLAIM_MINUTES", "0")],
                "CLAIM_MINUTES is \"0\"; it must be a whole number from 1 to 240",
            ),
            (
                &[("ON_EMPTY", "sleep")],
                "ON_EMPTY is \"sleep\"; it must be exit or wait",
            ),
            (
                &[("METABOB_LOG_FORMAT", "xml")],
                "METABOB_LOG_FORMAT is \"xml\"; it must be human or json",
            ),
            (
                &[("HARNESS_TIMEOUT", "-5")],
                "HARNESS_TIMEOUT is \"-5\"; it must be a whole number from 1 to 604800",
            ),
            (
                &[("RENEW_EVERY", "3601"), ("CLAIM_MINUTES", "60")],
                "RENEW_EVERY is \"3601\"; it must be a whole number from 1 to 3600",
            ),
        ];
        for (vars, want) in cases {
            let err = CellConfig::from_env(&env(vars), "box").expect_err("refused");
            assert_eq!(err.to_string(), *want);
        }
        let no_origin = Env::new([("HARNESS".to_string(), "x".to_string())], "/");
        assert_eq!(
            CellConfig::from_env(&no_origin, "h")
                .expect_err("refused")
                .to_string(),
            "ORIGIN is not set; it must name the repository's git URL"
        );
        let err = CellConfig::from_env(&env(&[("ORIGIN", "ftp://u:hunter2@git.lan/app.git")]), "h")
            .expect_err("refused")
            .to_string();
        assert!(
            err.starts_with("ORIGIN: ") && !err.contains("hunter2"),
            "{err}"
        );
    }

    #[test]
    fn a_retired_variable_is_named_and_json_logs_are_chosen_by_variable() {
        let c = CellConfig::from_env(
            &env(&[
                ("CONFLICT_MAX", "3"),
                ("METABOB_LOG_FORMAT", "json"),
                ("ON_EMPTY", "wait"),
            ]),
            "h",
        )
        .expect("valid");
        assert_eq!(c.retired, vec!["CONFLICT_MAX"]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(c.wait_when_empty);
    }
}
