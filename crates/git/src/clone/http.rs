use std::io::{self, BufRead, Cursor, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gix::protocol::transport::Protocol;
use gix::protocol::transport::client::blocking_io::Transport;
use gix::protocol::transport::client::blocking_io::http::{
    self as smart, GetResponse, Http, PostBodyDataKind, PostResponse, options::FollowRedirects,
};
use reqwest::blocking::{Client, Response};

use metabob_net::{NetCause, NetClient, Target, TlsWitness, Url};

/// As many hops as a redirect chain may take before the request fails.
const MAX_REDIRECTS: usize = 10;
/// A fetch's request bodies are want/have lists, kilobytes even for a large history; a
/// body past this is not one.
const MAX_UPLOAD_BYTES: usize = 64 << 20;

/// Our transport for an http(s) `url`; `None` for any other scheme, which gix's own
/// transports serve.
pub(super) fn connect_through(
    net: &NetClient,
    url: gix::Url,
    version: Protocol,
) -> Result<Option<Box<dyn Transport + Send>>, reqwest::Error> {
    if !matches!(url.scheme, gix::url::Scheme::Http | gix::url::Scheme::Https) {
        return Ok(None);
    }
    let http = NetHttp::new(net)?;
    Ok(Some(Box::new(smart::Transport::new_http(
        http, url, version, false,
    ))))
}

/// Why one request failed; the lines a clone's or fetch's error ends with.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// The one HTTP path's named cause (a refused certificate, a refused connection), with its
    /// hint where the cause says it: gix carries this error only as the text of an `io::Error`.
    #[error("{}", metabob_wire::report::with_hint(.0))]
    Named(NetCause),
    #[error(
        "the server answered 401 Unauthorized: it wants credentials, or refused the ones in the URL"
    )]
    Unauthorized,
    #[error("the server answered {0}")]
    Status(reqwest::StatusCode),
    /// `to` has its credentials masked, as every URL here.
    #[error("the server redirects to {to}")]
    Redirect { to: String },
    #[error("the server redirected to {to}, which is not the same repository path")]
    RedirectElsewhere { to: String },
    #[error("the request body is over {} MiB, more than a fetch sends", MAX_UPLOAD_BYTES >> 20)]
    UploadTooLarge,
    #[error("the request failed")]
    Request(#[source] reqwest::Error),
}

impl metabob_wire::report::Hint for Failure {
    fn hint(&self) -> Option<String> {
        match self {
            Failure::Redirect { .. } | Failure::RedirectElsewhere { .. } => {
                Some("use that address as the URL".into())
            }
            _ => None,
        }
    }
}

/// The request's failure `e` is, when it is one: gix keeps it inside the `io::Error` our
/// transport returned, and `io::Error::source` skips past what it wraps.
fn failure_of<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Failure> {
    e.downcast_ref::<io::Error>()
        .and_then(io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<Failure>())
}

/// The hint of the request's failure `e` is, if any.
pub(crate) fn hint_of(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    failure_of(e).and_then(metabob_wire::report::Hint::hint)
}

/// Whether a clone's error holds a refusal that trying again will not change (anchor:
/// refused_for_good): a certificate nothing trusts or for another name, a proxy's refusal,
/// credentials refused, a redirect, a 4xx. A refused or timed-out connection, a name that did
/// not resolve, a reset or a 5xx is the remote or the network, and can clear by itself; so can
/// whatever a `git://` or local remote reports.
pub(crate) fn refused_for_good(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(f) = failure_of(e) {
            return match f {
                Failure::Named(cause) => !matches!(
                    cause,
                    NetCause::DnsFailed { .. }
                        | NetCause::ConnectTimeout(_)
                        | NetCause::ConnectRefused(_)
                        | NetCause::ConnectionReset { .. }
                        | NetCause::ResponseTimeout { .. }
                        | NetCause::AnchorUnreachable(_)
                ),
                Failure::Status(status) => !status.is_server_error(),
                Failure::Request(_) => false,
                Failure::Unauthorized
                | Failure::Redirect { .. }
                | Failure::RedirectElsewhere { .. }
                | Failure::UploadTooLarge => true,
            };
        }
        next = e.source();
    }
    false
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `url` without its user and password: gix sends them itself, as an Authorization header,
/// and so they never sit in an error's URL either.
fn without_credentials(url: &str) -> Option<reqwest::Url> {
    let mut u = reqwest::Url::parse(url).ok()?;
    u.set_username("").ok()?;
    u.set_password(None).ok()?;
    Some(u)
}

/// The proxy `NetClient` chooses for `target`, as reqwest takes it: credentials in the URL.
fn proxy_url(net: &NetClient, target: &reqwest::Url) -> Option<reqwest::Url> {
    let proxy = net.proxy_for(&Url::parse(target.as_str()).ok()?).ok()??;
    let mut u = reqwest::Url::parse(&proxy.origin()).ok()?;
    if let Some(user) = proxy.username.as_deref() {
        u.set_username(user).ok()?;
    }
    if let Some(password) = proxy.password.as_deref() {
        u.set_password(Some(password)).ok()?;
    }
    Some(u)
}

/// Host and port of `url`, as the named causes carry them (an IPv6 host without brackets).
fn target_of(url: &reqwest::Url) -> Target {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(443);
    Target::new(host.trim_matches(['[', ']']), port)
}

/// gix's `Http` over a reqwest client built from a `NetClient`.
pub(super) struct NetHttp {
    client: Client,
    net: NetClient,
    witness: TlsWitness,
    /// Read by the redirect policy: whether the request in flight may follow one.
    may_follow: Arc<AtomicBool>,
    follow: FollowRedirects,
    first_request: bool,
    /// git's `http.extraHeader` lines.
    extra_headers: Vec<String>,
    /// The repository's URL after a followed redirect, for gix to continue from.
    redirected: Arc<Mutex<Option<String>>>,
}

impl NetHttp {
    fn new(net: &NetClient) -> Result<NetHttp, reqwest::Error> {
        let (tls, witness) = net.tls_for_transport();
        let may_follow = Arc::new(AtomicBool::new(false));
        let policy = {
            let may_follow = may_follow.clone();
            reqwest::redirect::Policy::custom(move |attempt| {
                let downgrade = attempt
                    .previous()
                    .last()
                    .is_some_and(|p| p.scheme() == "https" && attempt.url().scheme() != "https");
                if !may_follow.load(Ordering::SeqCst) {
                    attempt.stop()
                } else if downgrade {
                    attempt.error("an https remote may not redirect to plain http")
                } else if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
                } else {
                    attempt.follow()
                }
            })
        };
        let proxy_net = net.clone();
        let client = Client::builder()
            .tls_backend_preconfigured(tls)
            .proxy(reqwest::Proxy::custom(move |target| {
                proxy_url(&proxy_net, target)
            }))
            .redirect(policy)
            .connect_timeout(net.connect_budget())
            // A pack takes as long as it takes; reqwest's blocking default stops at 30 s.
            .timeout(None)
            .build()?;
        Ok(NetHttp {
            client,
            net: net.clone(),
            witness,
            may_follow,
            follow: FollowRedirects::default(),
            first_request: true,
            extra_headers: Vec::new(),
            redirected: Arc::new(Mutex::new(None)),
        })
    }

    /// One request, sent when its answer is first read (after gix wrote its body).
    fn exchange(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        upload: bool,
    ) -> Result<Arc<Mutex<Exchange>>, smart::Error> {
        let invalid = || smart::Error::Detail {
            description: format!(
                "{} is not a URL",
                metabob_process::guard::redact_url_credentials(url)
            ),
        };
        let target = without_credentials(url).ok_or_else(invalid)?;
        let base = without_credentials(base_url).ok_or_else(invalid)?;
        let ours = Url::parse(target.as_str()).map_err(|e| smart::Error::Detail {
            description: e.to_string(),
        })?;
        // A proxy setting that does not parse fails the request, as it fails every other.
        let proxy = self
            .net
            .proxy_for(&ours)
            .map_err(|cause| smart::Error::Detail {
                description: metabob_wire::report::with_hint(&cause),
            })?;
        let mut map = reqwest::header::HeaderMap::new();
        let lines = headers.into_iter().map(|h| h.as_ref().to_string());
        for line in lines.chain(self.extra_headers.iter().cloned()) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()),
                reqwest::header::HeaderValue::from_str(value.trim()),
            ) {
                map.append(name, value);
            }
        }
        // Configured headers are for this server alone, so they never follow a redirect.
        let may_follow = self.extra_headers.is_empty()
            && match self.follow {
                FollowRedirects::All => true,
                FollowRedirects::Initial => self.first_request,
                FollowRedirects::None => false,
            };
        self.first_request = false;
        let tail = target
            .as_str()
            .strip_prefix(base.as_str().trim_end_matches('/'))
            .unwrap_or_default()
            .to_string();
        let first_hop = proxy.map_or_else(|| target_of(&target), |p| p.target());
        Ok(Arc::new(Mutex::new(Exchange {
            pending: Some(Pending {
                client: self.client.clone(),
                upload,
                target,
                tail,
                headers: map,
                may_follow,
                first_hop,
                flag: self.may_follow.clone(),
                witness: self.witness.clone(),
                redirected: self.redirected.clone(),
            }),
            upload: Vec::new(),
            headers: None,
            response: None,
        })))
    }
}

impl Http for NetHttp {
    type Headers = Headers;
    type ResponseBody = Body;
    type PostBody = Upload;

    fn get(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<GetResponse<Headers, Body>, smart::Error> {
        let exchange = self.exchange(url, base_url, headers, false)?;
        Ok(GetResponse {
            headers: Headers::new(exchange.clone()),
            body: Body::new(exchange),
        })
    }

    fn post(
        &mut self,
        url: &str,
        base_url: &str,
        headers: impl IntoIterator<Item = impl AsRef<str>>,
        _body: PostBodyDataKind,
    ) -> Result<PostResponse<Headers, Body, Upload>, smart::Error> {
        let exchange = self.exchange(url, base_url, headers, true)?;
        Ok(PostResponse {
            post_body: Upload(exchange.clone()),
            headers: Headers::new(exchange.clone()),
            body: Body::new(exchange),
        })
    }

    fn configure(
        &mut self,
        config: &dyn std::any::Any,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync + 'static>> {
        if let Some(options) = config.downcast_ref::<smart::Options>() {
            self.follow = options.follow_redirects;
            self.extra_headers = options.extra_headers.clone();
        }
        Ok(())
    }

    fn redirected_base_url(&self) -> Option<String> {
        lock(&self.redirected).clone()
    }
}

/// A request not sent yet.
struct Pending {
    client: Client,
    upload: bool,
    target: reqwest::Url,
    /// What `target` adds to the repository's URL (`/info/refs?service=…`).
    tail: String,
    headers: reqwest::header::HeaderMap,
    may_follow: bool,
    /// The first hop (the proxy, or the target), for a connect failure.
    first_hop: Target,
    flag: Arc<AtomicBool>,
    witness: TlsWitness,
    redirected: Arc<Mutex<Option<String>>>,
}

impl Pending {
    /// Sends the request; the answer's header lines and its body on success.
    fn send(self, body: Vec<u8>) -> io::Result<(Vec<u8>, Response)> {
        let method = if self.upload {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let mut request = self
            .client
            .request(method, self.target.clone())
            .headers(self.headers.clone());
        if self.upload {
            request = request.body(body);
        }
        self.witness.forget();
        self.flag.store(self.may_follow, Ordering::SeqCst);
        let response = request.send().map_err(|e| self.failed(e))?;
        if response.url() != &self.target {
            let landed = response.url().as_str();
            let shown = metabob_process::guard::redact_url_credentials(landed);
            let base = landed
                .strip_suffix(self.tail.as_str())
                .filter(|_| !self.tail.is_empty())
                .ok_or_else(|| io::Error::other(Failure::RedirectElsewhere { to: shown }))?;
            *lock(&self.redirected) = Some(base.to_string());
        }
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            // gix asks the credential helpers on exactly this kind.
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                Failure::Unauthorized,
            ));
        }
        if status.is_redirection() {
            let to = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map_or_else(
                    || "elsewhere".to_string(),
                    metabob_process::guard::redact_url_credentials,
                );
            return Err(io::Error::other(Failure::Redirect { to }));
        }
        if !status.is_success() {
            return Err(io::Error::other(Failure::Status(status)));
        }
        let mut lines = Vec::new();
        for (name, value) in response.headers() {
            if let Ok(value) = value.to_str() {
                lines.extend_from_slice(format!("{name}: {value}\n").as_bytes());
            }
        }
        Ok((lines, response))
    }

    /// Names a request that got no answer the way the one HTTP path names it, when it can.
    fn failed(&self, e: reqwest::Error) -> io::Error {
        let at = e.url().unwrap_or(&self.target);
        if let Some(cause) = self.witness.refusal(&target_of(at)) {
            return io::Error::other(Failure::Named(cause));
        }
        if e.is_connect() && e.is_timeout() {
            return io::Error::other(Failure::Named(NetCause::ConnectTimeout(
                self.first_hop.clone(),
            )));
        }
        if e.is_connect() {
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                if let Some(io) = s.downcast_ref::<io::Error>() {
                    let hop = self.first_hop.clone();
                    match io.kind() {
                        io::ErrorKind::ConnectionRefused => {
                            return io::Error::other(Failure::Named(NetCause::ConnectRefused(hop)));
                        }
                        io::ErrorKind::TimedOut => {
                            return io::Error::other(Failure::Named(NetCause::ConnectTimeout(hop)));
                        }
                        _ => {}
                    }
                }
                source = s.source();
            }
        }
        io::Error::other(Failure::Request(e.without_url()))
    }
}

/// One request and its answer, shared by the three handles gix reads and writes.
struct Exchange {
    pending: Option<Pending>,
    upload: Vec<u8>,
    /// The answer's header lines, or why there is no answer; taken by `Headers`.
    headers: Option<io::Result<Vec<u8>>>,
    /// Taken by `Body`.
    response: Option<Response>,
}

impl Exchange {
    fn send_once(&mut self) {
        if let Some(pending) = self.pending.take() {
            match pending.send(std::mem::take(&mut self.upload)) {
                Ok((lines, response)) => {
                    self.headers = Some(Ok(lines));
                    self.response = Some(response);
                }
                Err(e) => self.headers = Some(Err(e)),
            }
        }
    }
}

/// The request body, kept until the answer is first read.
pub(super) struct Upload(Arc<Mutex<Exchange>>);

impl Write for Upload {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut exchange = lock(&self.0);
        if exchange.upload.len() + buf.len() > MAX_UPLOAD_BYTES {
            return Err(io::Error::other(Failure::UploadTooLarge));
        }
        exchange.upload.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The answer's headers as `name: value` lines; reading them sends the request. A failed
/// request is an error on the first read, as gix expects (401 as `PermissionDenied`).
pub(super) struct Headers {
    exchange: Arc<Mutex<Exchange>>,
    lines: Option<Cursor<Vec<u8>>>,
}

impl Headers {
    fn new(exchange: Arc<Mutex<Exchange>>) -> Headers {
        Headers {
            exchange,
            lines: None,
        }
    }

    fn lines(&mut self) -> io::Result<&mut Cursor<Vec<u8>>> {
        if self.lines.is_none() {
            let mut exchange = lock(&self.exchange);
            exchange.send_once();
            let lines = match exchange.headers.take() {
                Some(Err(e)) => return Err(e),
                Some(Ok(lines)) => lines,
                None => Vec::new(),
            };
            self.lines = Some(Cursor::new(lines));
        }
        Ok(self.lines.get_or_insert_with(Cursor::default))
    }
}

impl Read for Headers {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.lines()?.read(buf)
    }
}

impl BufRead for Headers {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.lines()?.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if let Some(lines) = self.lines.as_mut() {
            lines.consume(amt);
        }
    }
}

/// The answer's body, streamed; reading it sends the request if the headers did not.
pub(super) struct Body {
    exchange: Arc<Mutex<Exchange>>,
    stream: Option<io::BufReader<Response>>,
    taken: bool,
}

impl Body {
    fn new(exchange: Arc<Mutex<Exchange>>) -> Body {
        Body {
            exchange,
            stream: None,
            taken: false,
        }
    }

    fn stream(&mut self) -> io::Result<Option<&mut io::BufReader<Response>>> {
        if !self.taken {
            self.taken = true;
            let mut exchange = lock(&self.exchange);
            exchange.send_once();
            if let Some(Err(e)) = exchange.headers.take_if(|h| h.is_err()) {
                return Err(e);
            }
            self.stream = exchange.response.take().map(io::BufReader::new);
        }
        Ok(self.stream.as_mut())
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.stream()? {
            Some(s) => s.read(buf),
            None => Ok(0),
        }
    }
}

impl BufRead for Body {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.stream()? {
            Some(s) => s.fill_buf(),
            None => Ok(&[]),
        }
    }

    fn consume(&mut self, amt: usize) {
        if let Some(s) = self.stream.as_mut() {
            s.consume(amt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_no_userinfo() {
        let u = without_credentials("https://cell:pw@git.example:8443/app.git/info/refs")
            .expect("a URL");
        assert_eq!(u.as_str(), "https://git.example:8443/app.git/info/refs");
        assert!(without_credentials("not a url").is_none());
    }

    #[test]
    fn causes_print_hosts_as_the_one_http_path_does() {
        let v6 = reqwest::Url::parse("https://[::1]/app.git").expect("a URL");
        assert_eq!(target_of(&v6), Target::new("::1", 443));
        assert_eq!(target_of(&v6).to_string(), "[::1]:443");
        let named = reqwest::Url::parse("http://git.example:8080/x").expect("a URL");
        assert_eq!(target_of(&named).to_string(), "git.example:8080");
    }
}
