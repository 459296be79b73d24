//! A snapshot of the process environment, taken once at start.
//!
//! Configuration precedence writes CLI flags "into the environment" before the loaders run;
//! mutating the real process environment is unsound once threads exist, so every reader works
//! from this snapshot instead, and tests hand in their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
    cwd: PathBuf,
}

impl Env {
    pub fn from_process() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Env { vars, cwd }
    }

    pub fn new(vars: impl IntoIterator<Item = (String, String)>, cwd: impl Into<PathBuf>) -> Self {
        Env {
            vars: vars.into_iter().collect(),
            cwd: cwd.into(),
        }
    }

    /// A variable's value; an empty value reads as unset, as every shell-facing tool treats it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.vars.insert(name.to_string(), value.into());
    }

    /// Fills `name` only when it is still unset: the rule every configuration loader follows.
    pub fn set_default(&mut self, name: &str, value: impl Into<String>) -> bool {
        if self.is_set(name) {
            return false;
        }
        self.set(name, value);
        true
    }

    pub fn remove(&mut self, name: &str) {
        self.vars.remove(name);
    }

    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn home(&self) -> Option<PathBuf> {
        self.get("HOME")
            .or_else(|| self.get("USERPROFILE"))
            .map(PathBuf::from)
    }
}
