//! Webhooks as configured (issue 26): the JSON form each gets, their URLs checked, and a URL as it
//! may be logged (its path and query hidden: chat webhooks carry their token there). Pure.

/// The JSON form a webhook gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"text": ...}` only (Slack, Mattermost, Teams' and Discord's Slack-compatible endpoints).
    Slack,
    /// Every field of the notice (`notify::Notice`), `text` among them.
    Generic,
}

/// A configured webhook: `slack:URL` or `json:URL` choose the form; a bare URL gets the Slack form
/// on `hooks.slack.com` and the generic one elsewhere. Only http and https.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub format: Format,
    pub url: String,
}

impl Webhook {
    pub fn parse(text: &str) -> Result<Webhook, String> {
        let text = text.trim();
        let (format, url) = match text.split_once(':') {
            Some(("slack", rest)) => (Some(Format::Slack), rest),
            Some(("json", rest)) => (Some(Format::Generic), rest),
            _ => (None, text),
        };
        let host = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .map(|r| r.split(['/', '?', '#']).next().unwrap_or(""))
            .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
            .ok_or_else(|| format!("{} is not an http(s) URL", redact_url(url)))?;
        let format = format.unwrap_or(if host == "hooks.slack.com" { Format::Slack } else { Format::Generic });
        Ok(Webhook { format, url: url.to_string() })
    }
}

/// Webhooks from a comma-separated list (the `TAO_SLURM_NOTIFY` setting) or repeated flags.
pub fn parse_webhooks<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Vec<Webhook>, String> {
    items.into_iter().flat_map(|i| i.split(',')).filter(|s| !s.trim().is_empty()).map(Webhook::parse).collect()
}

/// A URL as it may be logged: scheme and host only, the rest (where tokens live) replaced by `/***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_string();
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or(host);
    if host.len() < rest.len() {
        format!("{scheme}://{host}/***")
    } else {
        format!("{scheme}://{host}")
    }
}
