//! resolve_impulse: the escape hatch. One allowlisted shape, sent once through the one ingress
//! with its own cap; everything else is refused before the gate, so a refused call sends nothing
//! at all, not even the attachment's first contact.

use std::time::Duration;

use serde_json::{Map, Value};

use super::allowlist::{Decision, Refusal, decide};
use super::{FIELD_CHARS, ImpulseArgs, clean};
use crate::ctx::{Ctx, Here};
use crate::tools::{Outcome, Reply, attached, resolve_failed};
use metabob_net::attachment::{Resolved, Sending};
use metabob_process::env::Env;

const TOOL: &str = "resolve_impulse";

/// The variable that sets the escape hatch's client cap, in milliseconds.
pub const TIMEOUT_VAR: &str = "RESOLVE_IMPULSE_TIMEOUT_MS";
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The cap never exceeds goal-host's, the longest any family has.
const MAX_TIMEOUT_MS: u64 = 60_000;
/// How much of a producer's body the reply shows.
pub const BODY_CHARS: usize = 2_048;

pub async fn resolve_impulse(ctx: &Ctx, here: &Here<'_>, a: ImpulseArgs) -> Reply {
    let (shape, pointer) = match compose(a) {
        Ok(p) => p,
        Err(why) => return Reply::error(format!("{TOOL}: {why}; nothing was sent")),
    };
    if let Decision::Refused(r) = decide(&shape) {
        return refused(&shape, r);
    }
    let att = match attached(here, TOOL).await {
        Ok(att) => att,
        Err(reply) => return reply,
    };
    let how = Sending {
        once: true,
        cap: Some(timeout(&ctx.env)),
    };
    match att.resolve_with(Value::Object(pointer), how).await {
        Ok(answer) => answered(&shape, answer),
        Err(e) => resolve_failed(TOOL, e),
    }
}

/// The pointer: `type` first, then the caller's fields, so a `type` among them wins. The shape
/// decided on is exactly the one sent.
fn compose(a: ImpulseArgs) -> Result<(String, Map<String, Value>), String> {
    let mut pointer = Map::new();
    pointer.insert("type".into(), Value::String(a.shape));
    pointer.extend(a.pointer.unwrap_or_default());
    let shape = match pointer.get("type") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) => return Err("the shape is empty".into()),
        _ => return Err("pointer.type must be a string naming the shape".into()),
    };
    pointer.insert("type".into(), Value::String(shape.clone()));
    Ok((shape, pointer))
}

/// The cap for one escape-hatch request: the variable when it is a positive number of
/// milliseconds, never above the maximum; the default otherwise.
fn timeout(env: &Env) -> Duration {
    let ms = env
        .get(TIMEOUT_VAR)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .min(MAX_TIMEOUT_MS);
    Duration::from_millis(ms)
}

fn refused(shape: &str, r: Refusal) -> Reply {
    Reply::error(format!(
        "{TOOL}: refused: {} — {}; instead: {}. Nothing was sent.",
        clean(shape, FIELD_CHARS),
        r.reason(),
        r.instead()
    ))
    .outcome(Outcome::Refused)
}

/// Any status the producer answered, with its body pretty-printed and cut.
fn answered(shape: &str, answer: Resolved) -> Reply {
    let body = match &answer.body {
        Value::Null => "(no JSON body)".to_string(),
        v => serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()),
    };
    let text = format!(
        "{TOOL}: {shape} answered HTTP {}\n{}",
        answer.status,
        cut(&body, BODY_CHARS)
    );
    if answer.status >= 400 {
        Reply::error(text)
    } else {
        Reply::ok(text)
    }
}

/// `body` up to `max` characters, saying so when it was cut.
fn cut(body: &str, max: usize) -> String {
    let total = body.chars().count();
    if total <= max {
        return body.to_string();
    }
    let kept: String = body.chars().take(max).collect();
    format!("{kept}\n… cut at {max} of {total} characters")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(shape: &str, pointer: Value) -> ImpulseArgs {
        ImpulseArgs {
            shape: shape.into(),
            pointer: pointer.as_object().cloned(),
        }
    }

    #[test]
    fn pointer_type_overrides_the_shape() {
        let (shape, p) = compose(args("memoryNote", json!({"type": "bash", "q": 1}))).unwrap();
        assert_eq!(shape, "bash");
        assert_eq!(Value::Object(p), json!({"type": "bash", "q": 1}));
        let (shape, _) = compose(args(" memoryNote ", Value::Null)).unwrap();
        assert_eq!(shape, "memoryNote");
        assert!(compose(args("memoryNote", json!({"type": 3}))).is_err());
        assert!(compose(args("  ", Value::Null)).is_err());
    }

    #[test]
    fn the_cap_defaults_and_never_exceeds_the_maximum() {
        let env = |v: &str| Env::new([(TIMEOUT_VAR.to_string(), v.to_string())], "/");
        assert_eq!(timeout(&Env::default()), Duration::from_secs(30));
        assert_eq!(timeout(&env("5000")), Duration::from_secs(5));
        assert_eq!(timeout(&env("600000")), Duration::from_secs(60));
        assert_eq!(timeout(&env("0")), Duration::from_secs(30));
        assert_eq!(timeout(&env("soon")), Duration::from_secs(30));
    }

    #[test]
    fn a_long_body_is_cut_and_says_so() {
        let long = "é".repeat(3000);
        let shown = cut(&long, BODY_CHARS);
        assert!(
            shown.ends_with("… cut at 2048 of 3000 characters"),
            "{shown}"
        );
        assert_eq!(cut("short", BODY_CHARS), "short");
    }
}
