//! Forwarding a pointer to the producer named for its shape with `--producer SHAPE=URL`, through
//! the project's one HTTP client, so proxies, trust and named causes apply here as everywhere.

use std::time::Duration;

use serde_json::{Value, json};

use super::errors::{ApiError, ForwardCause};
use super::resolve::Answer;
use metabob_net::{NetCause, NetClient, Request, Url};
use metabob_process::env::Env;

/// Sends pointers on to producers.
pub struct Forwarder {
    client: NetClient,
}

impl Forwarder {
    pub fn from_env(env: &Env) -> Forwarder {
        Forwarder {
            client: NetClient::from_env(env),
        }
    }

    /// POSTs `{pointer}` with the caller's Authorization header and hands back the producer's
    /// status and body unchanged; only a producer that gives no answer becomes `forward_failed`.
    // anchor: forward
    pub async fn forward(
        &self,
        shape: &str,
        url: &str,
        pointer: &Value,
        authorization: Option<String>,
        timeout: Duration,
    ) -> Result<Answer, ApiError> {
        let unreachable = |cause: ForwardCause| ApiError::ForwardUnreachable {
            shape: shape.to_string(),
            cause: Box::new(cause),
        };
        let target = Url::parse(url).map_err(|source| {
            unreachable(ForwardCause::BadUrl {
                url: url.to_string(),
                source,
            })
        })?;
        // A write must not run twice at the producer, and a read's retry is the client's call.
        let mut req = Request::post_json(target, &json!({ "pointer": pointer })).budget(timeout);
        if let Some(auth) = authorization {
            req = req.header("authorization", auth);
        }
        match self.client.send(req).await {
            Ok(resp) => Ok(Answer::Raw {
                status: resp.status,
                content_type: resp.header("content-type").map(str::to_string),
                body: resp.body,
            }),
            Err(e) => match e.cause {
                NetCause::ResponseTimeout { .. } => Err(ApiError::ForwardTimeout {
                    shape: shape.to_string(),
                    timeout_ms: timeout.as_millis() as u64,
                }),
                _ => Err(unreachable(ForwardCause::Net(e))),
            },
        }
    }
}
