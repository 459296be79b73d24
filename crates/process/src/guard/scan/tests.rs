use super::*;

fn rand_alnum(n: usize) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("OS randomness");
    buf.iter()
        .map(|b| A[*b as usize % A.len()] as char)
        .collect()
}

#[test]
fn entropy_tells_random_from_repetitive() {
    assert_eq!(entropy(""), 0.0);
    assert_eq!(entropy("aaaaaaaaaaaaaaaa"), 0.0);
    assert!((entropy("abababab") - 1.0).abs() < 1e-9);
    assert!((entropy("0123456789abcdef") - 4.0).abs() < 1e-9);
    assert!(entropy(&rand_alnum(40)) >= MIN_ENTROPY);
    assert!(entropy("passwordpassword") < MIN_ENTROPY);
}

#[test]
fn names_split_into_words() {
    assert_eq!(name_words("apiKey"), ["API", "KEY"]);
    assert_eq!(name_words("AWS_SECRET_ACCESS_KEY").len(), 4);
    assert_eq!(
        name_words("//registry.npmjs.org/:_authToken"),
        ["REGISTRY", "NPMJS", "ORG", "AUTH", "TOKEN"]
    );
}

#[test]
fn secret_names_and_qualifiers() {
    for n in [
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "apiKey",
        "client_secret",
        "AWS_SECRET_ACCESS_KEY",
        "APIKEY",
        "GOOGLE_CREDENTIALS",
        "passwd",
        "x-api-key",
    ] {
        assert!(is_secret_name(n), "{n} should be secret-named");
    }
    for n in [
        "MAX_TOKENS",
        "TOKEN_TTL",
        "KEY_ROTATION_DAYS",
        "NUM_KEYS",
        "TOKEN_LIMIT",
        "KEY_LENGTH",
        "TOKEN_EXPIRY",
        "RETRY_COUNT",
        "SSH_KEY_PATH",
        "AWS_ACCESS_KEY_ID",
        "TOKEN_URL",
        "KEYBOARD_LAYOUT",
        "TOKENIZER",
        "HOME",
    ] {
        assert!(!is_secret_name(n), "{n} should not be secret-named");
    }
}

#[test]
fn placeholders() {
    for v in [
        "YOUR_API_KEY",
        "your-token-here",
        "<token>",
        "***",
        "xxxxxxxx",
        "zzzzzzzzzzzzzzzz",
        "API_KEY",
        "SECRET",
        "${GITHUB_TOKEN}",
        "$GITHUB_TOKEN",
        "${{ secrets.NPM_TOKEN }}",
        "true",
        "None",
        "changeme",
        "password",
        "4096",
        "30s",
        "5m",
        "\"\"",
        "AKIAIOSFODNN7EXAMPLE",
        "[REDACTED]",
    ] {
        assert!(is_placeholder(v), "{v} should be a placeholder");
    }
    for v in [
        "hunter2",
        "HUNTER2",
        "s3cr3t",
        "correct-horse",
        "wJalrXUtnFEMI",
    ] {
        assert!(!is_placeholder(v), "{v} should not be a placeholder");
    }
}

#[test]
fn known_values_need_length_randomness_and_no_location() {
    assert!(counts_as_known_value(&rand_alnum(24)));
    assert!(!counts_as_known_value("short1A"));
    assert!(!counts_as_known_value("/usr/local/share/keys/x.pem"));
    assert!(!counts_as_known_value("https://api.example.org/v1/tokens"));
    assert!(!counts_as_known_value("aaaaaaaaaaaaaaaaaaaaaaaa"));
    assert!(!counts_as_known_value("YOUR_SECRET_ACCESS_KEY_HERE"));
}

#[test]
fn each_token_pattern_fires_on_a_real_shape() {
    let cases = [
        (format!("ghp_{}", rand_alnum(36)), SecretKind::GithubToken),
        (
            format!("github_pat_{}", rand_alnum(60)),
            SecretKind::GithubToken,
        ),
        (format!("glpat-{}", rand_alnum(20)), SecretKind::GitlabToken),
        (format!("npm_{}", rand_alnum(36)), SecretKind::NpmToken),
        (
            format!("xoxb-1234567890-{}", rand_alnum(24)),
            SecretKind::SlackToken,
        ),
        (format!("AIza{}", rand_alnum(35)), SecretKind::GoogleApiKey),
        (format!("sk_live_{}", rand_alnum(24)), SecretKind::StripeKey),
        (format!("rk_live_{}", rand_alnum(24)), SecretKind::StripeKey),
        (format!("sk-proj-{}7", rand_alnum(48)), SecretKind::SkApiKey),
        (
            format!("mb_live_{}", crate::random::random_hex(16)),
            SecretKind::MetabobKey,
        ),
        ("AKIA2E0A8F3B244C9986".to_string(), SecretKind::AwsAccessKey),
        ("ASIAY34FZKBOKMUTVV7A".to_string(), SecretKind::AwsAccessKey),
    ];
    for (token, kind) in cases {
        let text = format!("we hit a 401 with {token} in the request");
        assert_eq!(scan_patterns(&text), Some(kind), "{text}");
    }
}

#[test]
fn token_patterns_skip_examples_and_masks() {
    for text in [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "ghp_<your token>",
        "sk-this-is-a-kebab-case-identifier-not-a-key",
        "task-1234567890abcdefghijklmnopqrstuv",
        "npm_config_cache=/tmp/npm",
        "AKIA1234",
    ] {
        assert_eq!(scan_patterns(text), None, "{text}");
    }
}

#[test]
fn private_key_needs_a_body() {
    let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIGz4lZq1o7yF2c0pN3mS8Qx5bJvT1uWkR9dHa6eLfYcP\n-----END PRIVATE KEY-----\n";
    assert_eq!(scan_patterns(pem), Some(SecretKind::PrivateKey));
    assert_eq!(
        scan_patterns("the file starts with -----BEGIN OPENSSH PRIVATE KEY----- and then"),
        None
    );
    assert_eq!(
        scan_patterns(
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
        ),
        None
    );
}

#[test]
fn jwt_needs_three_segments() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    assert_eq!(scan_patterns(jwt), Some(SecretKind::Jwt));
    assert_eq!(scan_patterns("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx"), None);
}

#[test]
fn headers_and_cookies_need_random_tokens() {
    let tok = rand_alnum(32);
    assert_eq!(
        scan_patterns(&format!("curl -H 'Authorization: Bearer {tok}' https://x")),
        Some(SecretKind::AuthorizationHeader)
    );
    assert_eq!(
        scan_patterns(&format!("authorization: token {tok}")),
        Some(SecretKind::AuthorizationHeader)
    );
    assert_eq!(
        scan_patterns("Authorization: Bearer <token>"),
        None,
        "a slot is not a token"
    );
    assert_eq!(scan_patterns("send a bearer token in the header"), None);
    assert_eq!(
        scan_patterns(&format!("Cookie: theme=dark; session={tok}")),
        Some(SecretKind::Cookie)
    );
    assert_eq!(
        scan_patterns("Set-Cookie: theme=dark; Path=/; HttpOnly"),
        None
    );
}

#[test]
fn url_credentials_count_however_weak() {
    assert_eq!(
        scan_patterns("postgres://admin:s3cr3t@db/x"),
        Some(SecretKind::UrlCredentials)
    );
    assert_eq!(scan_patterns("postgres://admin:***@host/x"), None);
    assert_eq!(scan_patterns("postgres://admin:${DB_PASS}@host/x"), None);
    assert_eq!(scan_patterns("https://user@example.org/x"), None);
    assert_eq!(scan_patterns("see https://example.org/a@b"), None);
}

#[test]
fn assignments() {
    for text in [
        "DB_PASSWORD=hunter2",
        "export API_KEY=abc123def456",
        "password: hunter2",
        r#"{"client_secret": "Zk29xlq0Pq1mVb"}"#,
        "  db_pass = s3cr3t  # prod",
    ] {
        assert_eq!(
            scan_patterns(text),
            Some(SecretKind::ConfigAssignment),
            "{text}"
        );
    }
    for text in [
        "MAX_TOKENS=4096",
        "TOKEN_TTL=30s",
        "KEY_ROTATION_DAYS=90",
        "API_KEY=YOUR_API_KEY",
        "GITHUB_TOKEN=${GITHUB_TOKEN}",
        "password=changeme",
        "sort_key: created_at",
        "Key: this breaks when the cache is cold",
        "if token == expected {",
        "SSH_KEY_PATH=/home/x/.ssh/id_ed25519",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "TOKEN=<token>",
        "secret=***",
    ] {
        assert_eq!(scan_patterns(text), None, "{text}");
    }
}
