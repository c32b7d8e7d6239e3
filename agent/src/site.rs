//! Origins and sites, parsed without a URL library.
//!
//! The gate needs two answers: the key under which per-site permissions are stored (the page's
//! origin, normalized) and whether a link or form leaves the origin: another scheme, host or
//! port is another origin (`http://` and `https://` of one host too; `www.` too), as the
//! browser's own security boundary has it.

/// The parts of an absolute URL the gate cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: Option<u16>,
}

impl Origin {
    /// Parses `scheme://[user@]host[:port][/...]`; `None` for anything without an authority
    /// (`mailto:`, `javascript:`, relative URLs) or with an invalid port.
    pub(crate) fn parse(url: &str) -> Option<Self> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://")?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return None;
        }
        let authority = rest
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default()
            .rsplit('@')
            .next()
            .unwrap_or_default();
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            // IPv6 literal.
            let (host, after) = bracketed.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(port) => Some(port),
                None if after.is_empty() => None,
                None => return None,
            };
            (format!("[{host}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (authority.to_owned(), None),
            }
        };
        if host.is_empty() {
            return None;
        }
        let scheme = scheme.to_ascii_lowercase();
        let port = match port {
            None | Some("") => None,
            Some(port) => Some(port.parse::<u16>().ok()?),
        };
        let default_port = match scheme.as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        };
        Some(Self {
            port: port.filter(|p| Some(*p) != default_port),
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            scheme,
        })
    }

    /// `scheme://host[:port]`.
    pub(crate) fn to_origin_string(&self) -> String {
        match self.port {
            Some(port) => format!("{}://{}:{port}", self.scheme, self.host),
            None => format!("{}://{}", self.scheme, self.host),
        }
    }
}

/// The key per-site permissions are stored under: the normalized origin
/// (`https://Example.com:443/path` → `https://example.com`), or the trimmed text itself when it
/// is not a URL with a host (e.g. `file:///...` pages keep their full text).
pub fn site_key(site: &str) -> String {
    match Origin::parse(site) {
        Some(origin) => origin.to_origin_string(),
        None => site.trim().to_owned(),
    }
}

/// Where a navigation to `url` from a page on `current_site` would go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination {
    /// Same origin (scheme, host and port).
    SameSite,
    /// The page's own script (`javascript:` URLs) or a fragment: not a navigation away.
    InPage,
    /// Another site, or a scheme that hands off to another app (`mailto:`, `tel:`) or cannot be
    /// judged; the string describes it for the user.
    Elsewhere(String),
}

pub(crate) fn destination(current_site: &str, url: &str) -> Destination {
    let url = url.trim();
    if url.is_empty() || url.starts_with('#') {
        return Destination::InPage;
    }
    let lowered = url.to_ascii_lowercase();
    if lowered.starts_with("javascript:") {
        return Destination::InPage;
    }
    let (Some(target), Some(current)) = (Origin::parse(url), Origin::parse(current_site)) else {
        return Destination::Elsewhere(url.chars().take(200).collect());
    };
    if target == current {
        Destination::SameSite
    } else {
        Destination::Elsewhere(target.to_origin_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_origins() {
        assert_eq!(
            site_key("https://Example.COM:443/a/b?c#d"),
            "https://example.com"
        );
        assert_eq!(
            site_key("http://example.com:8080"),
            "http://example.com:8080"
        );
        assert_eq!(
            site_key("http://user:pw@example.com/x"),
            "http://example.com"
        );
        assert_eq!(site_key("http://[::1]:3000/"), "http://[::1]:3000");
        assert_eq!(site_key("http://127.0.0.1:80/"), "http://127.0.0.1");
        assert_eq!(site_key(" about:blank "), "about:blank");
        assert_eq!(Origin::parse("http://example.com:99999"), None);
        assert_eq!(Origin::parse("mailto:a@b.c"), None);
    }

    #[test]
    fn judges_destinations() {
        let here = "https://shop.example.com";
        assert_eq!(
            destination(here, "https://shop.example.com/cart"),
            Destination::SameSite
        );
        assert_eq!(
            destination(here, "https://SHOP.example.com:443/cart"),
            Destination::SameSite
        );
        assert_eq!(
            destination(here, "http://shop.example.com/cart"),
            Destination::Elsewhere("http://shop.example.com".into())
        );
        assert_eq!(
            destination("https://www.example.com", "https://example.com/x"),
            Destination::Elsewhere("https://example.com".into())
        );
        assert_eq!(
            destination("http://127.0.0.1:8000", "http://localhost:8000/x"),
            Destination::Elsewhere("http://localhost:8000".into())
        );
        assert_eq!(destination(here, "#top"), Destination::InPage);
        assert_eq!(destination(here, "javascript:void(0)"), Destination::InPage);
        assert_eq!(
            destination(here, "https://evil.test/steal"),
            Destination::Elsewhere("https://evil.test".into())
        );
        assert_eq!(
            destination(here, "https://example.com/"),
            Destination::Elsewhere("https://example.com".into())
        );
        assert_eq!(
            destination(here, "mailto:someone@example.com"),
            Destination::Elsewhere("mailto:someone@example.com".into())
        );
        assert_eq!(
            destination(here, "/relative"),
            Destination::Elsewhere("/relative".into())
        );
    }
}
