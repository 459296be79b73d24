//! Forwarding a pointer to the producer named for its shape with `--producer SHAPE=URL`.

use std::time::Duration;

use serde_json::Value;

use super::errors::ApiError;
use super::resolve::Answer;
use crate::env::Env;

/// Sends pointers on to producers. Placeholder until the project's HTTP client lands.
pub struct Forwarder;

impl Forwarder {
    pub fn from_env(_env: &Env) -> Forwarder {
        Forwarder
    }

    pub async fn forward(
        &self,
        shape: &str,
        _url: &str,
        _pointer: &Value,
        _authorization: Option<String>,
        _timeout: Duration,
    ) -> Result<Answer, ApiError> {
        Err(ApiError::ForwardUnreachable {
            shape: shape.to_string(),
            detail: "forwarding is not built yet".into(),
        })
    }
}
