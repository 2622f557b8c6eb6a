//! A webhook endpoint URL: http(s), a host, no credentials, bounded length.
//! The text must be a URL as written, not one the lenient WHATWG parser
//! repairs: `http:///nohost`, `http:nohost` or `http:\\host` would be stored
//! as `http://nohost/`, so an authority right after `scheme://` is required
//! and spaces or control characters are refused. Whether the address may be
//! connected to is judged elsewhere (`net_policy`), with the allow-list.
use url::Url;

use super::ValidationError;

const MAX_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl(Url);

impl EndpointUrl {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "url";
        if text.len() > MAX_LEN {
            return Err(ValidationError::new(field, format!("must be at most {MAX_LEN} characters")));
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(ValidationError::new(field, "must not contain spaces or control characters"));
        }
        match written_authority(text) {
            None => return Err(ValidationError::new(field, "must be `http://host/…` or `https://host/…`")),
            Some(authority) if authority.contains('@') => {
                return Err(ValidationError::new(field, "must not contain credentials"))
            }
            Some(_) => {}
        }
        let url =
            Url::parse(text).map_err(|error| ValidationError::new(field, format!("is not a valid URL ({error})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ValidationError::new(field, "must use http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ValidationError::new(field, "must have a host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ValidationError::new(field, "must not contain credentials"));
        }
        if url.fragment().is_some() {
            return Err(ValidationError::new(field, "must not contain a fragment"));
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }
}

/// The authority as written between `scheme://` and the path, query or
/// fragment; `None` when the text has no `//` there or nothing after it.
fn written_authority(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once(':')?;
    let rest = rest.strip_prefix("//")?;
    let authority = &rest[..rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len())];
    (!authority.is_empty()).then_some(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_with_a_host_are_accepted() {
        assert!(EndpointUrl::parse("https://example.com/hook").is_ok());
        assert!(EndpointUrl::parse("http://127.0.0.1:8080/sim/ok").is_ok());
        assert!(EndpointUrl::parse("HTTPS://Example.com:8443?q=1").is_ok());
        assert!(EndpointUrl::parse("http://[::1]:80/").is_ok());
        for bad in [
            "ftp://example.com/",
            "https://user:pw@example.com/",
            "not a url",
            "https://",
            "https://example.com/#frag",
            "file:///etc/passwd",
            "http:///nohost",
            "http:nohost",
            "http:/nohost",
            "http:\\\\nohost",
            "http://\\nohost/",
            "http://?x",
            "http://@example.com/",
            "http://example.com/a b",
            " http://example.com/",
            "http://exa\tmple.com/",
        ] {
            assert!(EndpointUrl::parse(bad).is_err(), "{bad} should be refused");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_LEN));
        assert!(EndpointUrl::parse(&long).is_err());
    }
}
